"""Running commands in the real level-1 sandbox from tests, and finding their host processes."""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

from cluster import sandbox
from cluster.sandbox import Limits, Result

QUICK = Limits(wall_seconds=20)


def run(
    argv: list[str],
    workdir: Path,
    limits: Limits = QUICK,
    *,
    stopping: threading.Event | None = None,
    stdin: bytes = b"",
    run_id: int | None = None,
    git_writable: bool = False,
    stderr_apart: bool = False,
) -> Result:
    box = sandbox.for_level(1)
    return box.run(
        argv,
        workdir=workdir,
        limits=limits,
        stopping=stopping,
        stdin=stdin,
        run_id=run_id,
        git_writable=git_writable,
        stderr_apart=stderr_apart,
    )


def sh(script: str, workdir: Path, limits: Limits = QUICK, *, run_id: int | None = None) -> Result:
    return run(["sh", "-c", script], workdir, limits, run_id=run_id)


def python(
    code: str, *args: str, workdir: Path, limits: Limits = QUICK, run_id: int | None = None
) -> Result:
    return run(["/usr/bin/python3", "-c", code, *args], workdir, limits, run_id=run_id)


def processes_with(marker: str) -> list[str]:
    """Host processes whose command line has `marker` (the test's own is a random number)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue  # gone meanwhile
            if marker.encode() in cmdline:
                found.append(f"{entry.name}: {cmdline!r}")
    return found


def marker() -> str:
    """A sleep duration nobody else uses, to find our processes."""
    return f"{secrets.randbelow(10**6) + 1000}.{secrets.randbelow(1000):03d}"
