"""Stopping the processes a test started, whatever state they are in."""

from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen[bytes], *, grace: float = 15) -> None:
    """Ask `process` to stop, and kill it if it has not within `grace` seconds: a worker left
    running would claim the runs of the tests after it and hold locks their flush needs."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)
