"""The kernel's exceptions, in one module (as huey keeps its own)."""

from __future__ import annotations

from datetime import datetime

from agentos.core.errors import DomainError


class KernelError(DomainError):
    """Refused input or an impossible journal operation; nothing was written."""


class LeaseLost(Exception):  # a condition, not a programming error
    """A fenced write touched zero rows: another worker owns the run now. Stop, write nothing."""


class JournalMismatch(KernelError):
    """Replay asked for a different step than the one recorded at this seq (non-determinism)."""

    code = "journal_mismatch"
    status = 409


class Suspend(Exception):  # control flow, raised through the run's program
    """The run waits (owner, timer, children). It leaves the worker; the wait is a journal row."""

    def __init__(self, runnable_at: datetime | None, reason: str) -> None:
        super().__init__(reason)
        self.runnable_at = runnable_at
        self.reason = reason


class Stop(Exception):  # control flow, raised through the run's program
    """The run must end now with `status` (cancelled, budget_exhausted), before its next step."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class StepFailed(Exception):
    """Raised by a step's executor for a failure the program may handle (recorded as the result)."""
