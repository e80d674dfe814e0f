"""A child process that ends with its parent, whatever killed the parent."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGTERM, *, parent: int | None = None) -> None:
    """This process gets `sig` when its parent dies: a SIGKILLed parent must not leave orphans
    serving or working. Run in a child before exec, or first thing in a started one with the
    `parent` that started it: if that one died meanwhile, the signal comes now."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
