"""Tools by name (`TOOLS`: the built-ins and those the apps add from their `ready()`); a run's
tool list is frozen, in a deterministic order, when it starts."""

from __future__ import annotations

import hashlib
import json

from agentos.core.registries import Registry
from tools.base import Tool

TOOLS: Registry[Tool] = Registry("tool")


def frozen(names: list[str]) -> list[Tool]:
    """The run's tools, sorted by name: the same list, in the same order, on every turn."""
    missing = sorted(set(names) - set(TOOLS.names()))
    if missing:
        raise ValueError(f"Unknown tool(s): {', '.join(missing)}.")
    return [TOOLS[name] for name in sorted(set(names))]


def fingerprint(tools: list[Tool]) -> str:
    """The hash a run records of its tool list (names, descriptions, schemas)."""
    body = json.dumps(
        [[t.name, t.description, t.input_schema, t.effect] for t in tools], sort_keys=True
    )
    return hashlib.sha256(body.encode()).hexdigest()
