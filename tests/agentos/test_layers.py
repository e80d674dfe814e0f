"""The import contracts name the whole project shell: a module added to `agentos/` outside the
bottom package is either listed as shell (nothing may import it) or moved into `agentos.core`."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import agentos

ROOT = Path(__file__).resolve().parents[2]


def test_the_shell_contract_names_every_module_of_the_shell() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    shell = next(c for c in contracts if c["name"] == "Nothing imports the project shell")
    modules = {
        f"agentos.{info.name}"
        for info in pkgutil.iter_modules(agentos.__path__)
        if info.name != "core"
    }
    assert modules == set(shell["forbidden_modules"])
