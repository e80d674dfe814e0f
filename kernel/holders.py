"""Who holds a lease: a worker process named so that its death can be proven.

A lease holder is written in `kernel_run.lease_owner` as `host:pid:start:space`, where `start` is
the process's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22) and `space`
names where that pid means something (the machine's boot id and the pid namespace). A claimer on
the same machine and in the same pid namespace can then tell, without waiting for the lease to
run out, that the holder is gone: no process has that pid, or the process with that pid started
at another time (the pid was reused), or it is a zombie. Anything it cannot prove (another host,
another namespace, an unreadable `/proc`, a name in another format) counts as alive: a lease is
never taken from a holder that may still run. A holder that is only paused (SIGSTOP) is alive
here; the fencing token keeps a takeover after its lease ran out safe.
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    start: int  # clock ticks since boot
    space: str  # boot id + pid namespace

    @property
    def name(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}:{self.space}"


def parse(name: str) -> Holder | None:
    """The holder a lease names, or None for a name that is not one (tests, older leases)."""
    parts = name.rsplit(":", 3)
    if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit() or not parts[3]:
        return None
    return Holder(parts[0], int(parts[1]), int(parts[2]), parts[3])


@functools.cache
def _space() -> str | None:
    """This machine's boot and our pid namespace; None where `/proc` does not tell (not Linux)."""
    try:
        boot = (PROC / "sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:16]
        namespace = (PROC / "self/ns/pid").stat().st_ino
    except OSError:
        return None
    return f"{boot}.{namespace}"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start ticks) of `pid`, or None when its `/proc` entry cannot be read."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def this_process() -> Holder | None:
    """This process as a lease holder; None where its death could not be proven anyway."""
    space = _space()
    found = _stat(os.getpid())
    if space is None or found is None:
        return None
    return Holder(socket.gethostname(), os.getpid(), found[1], space)


def is_local(holder: Holder) -> bool:
    return holder.space == _space() and holder.host == socket.gethostname()


def gone(holder: Holder) -> bool:
    """True only when the holder's process provably no longer runs on this machine."""
    if not is_local(holder):
        return False
    try:
        os.kill(holder.pid, 0)  # ESRCH is proof; a hidden /proc entry (hidepid) is not
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, as another user: look at its start time
    found = _stat(holder.pid)
    if found is None:
        return False  # exists, unreadable: cannot prove anything
    state, start = found
    # A zombie has exited (its parent has not collected it yet); a new start time is a reused pid.
    return start != holder.start or state in ("Z", "X", "x")
