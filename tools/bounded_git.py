"""Host git whose output is bounded while it is produced: stdout read from the pipe as it comes,
git killed past a limit. For what the repository decides the size of (a push's diff, its list
of changes, a commit read back), so that the worker holds at most the limit whatever it is."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tools import workspace
from tools.base import ToolError


@dataclass(frozen=True)
class Bounded:
    """What `run` read: at most `limit` bytes of stdout, whether git had more."""

    out: bytes
    cut: bool
    returncode: int | None  # None when git was stopped because it had more to say
    stderr: str


STDERR_KEPT = 64 << 10


def run(
    cwd: Path,
    *args: str,
    limit: int,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    stopping: threading.Event | None = None,
) -> Bounded:
    """`workspace.host_git` whose stdout is read from the pipe as it comes, at most `limit`
    bytes: past that git is killed and what was read is returned, marked cut. Bytes in and out
    (paths and messages are not always UTF-8). What the repository holds decides how much git
    would write (a diff of a 300 MB file); this bounds what the worker holds whatever it is."""
    argv = ["git", *workspace.HARDENED, *args]
    process = subprocess.Popen(  # noqa: S603  # an argv list, no shell
        argv,
        cwd=cwd,
        env=workspace.git_environment(env),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None  # noqa: S101  # PIPE above
    assert process.stderr is not None  # noqa: S101
    if stdin is not None:
        threading.Thread(target=_feed, args=(process, stdin), daemon=True).start()
    out, err = bytearray(), bytearray()
    cut = False
    deadline = time.monotonic() + workspace.GIT_TIMEOUT
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        try:
            while selector.get_map() and not cut:
                if stopping is not None and stopping.is_set():
                    raise ToolError(f"git {workspace.subcommand(args)}: cancelled.")
                if time.monotonic() > deadline:
                    seconds = workspace.GIT_TIMEOUT
                    raise ToolError(
                        f"git {workspace.subcommand(args)}: took longer than {seconds} s."
                    )
                for key, _ in selector.select(workspace.STOP_POLL_SECONDS):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.data is out:
                        out += chunk[: limit - len(out) + 1]
                        if len(out) > limit:
                            del out[limit:]
                            cut = True
                    elif len(err) < STDERR_KEPT:
                        err += chunk
        finally:
            if selector.get_map():  # cut, cancelled or late: git still has more to say
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.stdout.close()
            process.stderr.close()
            process.wait()
    return Bounded(
        bytes(out),
        cut,
        None if cut else process.returncode,
        err[:STDERR_KEPT].decode(errors="replace"),
    )


def _feed(process: subprocess.Popen[bytes], data: bytes) -> None:
    """Write `data` to the process's stdin and close it (in a thread, so a process that writes
    before it has read everything never deadlocks with us)."""
    assert process.stdin is not None  # noqa: S101  # PIPE in the caller
    with contextlib.suppress(OSError):  # git stopped reading: it was killed or failed
        process.stdin.write(data)
    with contextlib.suppress(OSError):
        process.stdin.close()
