"""Worktrees for the sandbox tests: real git repositories under a directory the sandbox user can
traverse (pytest's own tmp_path lives under a 0700 directory when we are root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import sandbox
from cluster.runner import cgroups

GIT = ["git", "-c", "user.name=agentos tests", "-c", "user.email=tests@agentos.invalid"]


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [*GIT, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return done.stdout


@pytest.fixture(scope="session")
def sandbox_base() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="agentos-sandbox-tests-", dir="/tmp"))
    base.chmod(0o711)  # searchable, not listable, by the sandbox user
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def workdir(sandbox_base: Path) -> Path:
    path = Path(tempfile.mkdtemp(prefix="work-", dir=sandbox_base))
    sandbox.give(path)
    return path


def make_repo(path: Path) -> Path:
    path.mkdir()
    git("init", "--quiet", "--initial-branch=main", cwd=path)
    (path / "README").write_text("hello\n")
    git("add", "README", cwd=path)
    git("commit", "--quiet", "-m", "First commit", cwd=path)
    return path


@pytest.fixture
def plain_repo(sandbox_base: Path) -> Path:
    """A clone-like repository whose .git is a directory, given whole to the sandbox user."""
    repo = make_repo(Path(tempfile.mkdtemp(prefix="plain-", dir=sandbox_base)) / "repo")
    sandbox.give(repo.parent)
    return repo


@pytest.fixture
def worktree(sandbox_base: Path) -> Path:
    """A linked worktree (`.git` is a file) of a repository that stays ours, as a run gets it."""
    parent = Path(tempfile.mkdtemp(prefix="linked-", dir=sandbox_base))
    parent.chmod(0o711)
    repo = make_repo(parent / "repo")
    path = parent / "worktree"
    git("worktree", "add", "--quiet", "-b", "agent", str(path), cwd=repo)
    sandbox.give(path)
    return path


@pytest.fixture
def rlimits_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The degraded mode: as on a node without usable cgroups."""
    cgroups.mode()  # detected first, so the patch is not overwritten
    monkeypatch.setattr(cgroups, "_backend", None)
    monkeypatch.setattr(cgroups, "_mode", cgroups.Mode("rlimits", "patched by the test"))


# The egress service and its test hosts, for test_egress and test_exfiltration.
from tests.cluster.egress_fixtures import (  # noqa: E402, F401
    egress_dir,
    elsewhere,
    provider,
    service,
    upstream,
)
