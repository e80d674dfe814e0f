"""Helpers for the hostile-worktree tests: a deadline on a whole run, and files committed to
the project's repository before a run starts."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.models import Run

DEADLINE = 90.0  # the whole run; a blocked tool would hold it forever


def within(seconds: float, start: Callable[[], Run]) -> Run:
    """`start()` in a thread that must end within `seconds`; on failure, FIFOs in worktrees are
    opened for writing so a blocked reader is released (and the next tests can run)."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(start())
        except BaseException as error:  # reported in the test's thread
            box.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        _release_fifos()
        thread.join(10)
        pytest.fail(f"the run did not end within {seconds} s: a tool blocked")
    if isinstance(box[0], BaseException):
        raise box[0]
    assert isinstance(box[0], Run)
    return box[0]


def _release_fifos() -> None:
    for workspace in Run.objects.exclude(workspace="").values_list("workspace", flat=True):
        for here, _dirs, names in os.walk(workspace):
            for name in names:
                path = Path(here) / name
                if stat.S_ISFIFO(path.lstat().st_mode):
                    with contextlib.suppress(OSError):
                        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def commit(repo: Path, files: dict[str, str]) -> None:
    """Add files to the project's repository, as its owner would (before any run)."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (
        ["git", "add", "--all"],
        ["git", "-c", "user.name=owner", "-c", "user.email=o@x", "commit", "-qm", "setup"],
    ):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)
