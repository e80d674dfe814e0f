"""Waiting before a model request is retried, and telling why a model step was cut short.

A provider's transient error (overloaded, rate limited) is retried within the same model step
after a short backoff (past that, or for a longer `retry-after`, the step is held durably:
`missions.engine.outage`). Nothing is journaled meanwhile, so the wait must end the
moment the step's `stopping` event is set (by the lease keeper), and then say why it ended:
a stop request ends the run now, a lost lease ends this execution, and an owner's interrupt only
cuts the wait short (the request is sent again at once). A model's answer cut short by the same
event is told apart the same way (`must_stop`).
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from kernel.context import StepCall
from kernel.exceptions import LeaseLost, Stop
from kernel.models import Run, RunStatus

MAX_BACKOFF_SECONDS = 60.0
# A provider asking for a longer pause than this is waited out durably (`outage`), not by
# holding a worker.
IN_STEP_MAX_SECONDS = 10.0


def too_long(retry_after: float | None) -> bool:
    """Whether the provider's `retry-after` is too long to wait for in the step."""
    return retry_after is not None and retry_after > IN_STEP_MAX_SECONDS


def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """The provider's `retry-after` if it gave one, else exponential; at most a minute."""
    return min(retry_after or 2**attempt, MAX_BACKOFF_SECONDS)


def wait_before_retry(call: StepCall, seconds: float) -> bool:
    """Sleep `seconds` unless the step is asked to stop first; raise if the run must end.
    True when an owner's interrupt cut the wait short."""
    if not call.stopping.wait(seconds):
        return False
    must_stop(call, "stopped while waiting to retry the model")
    return True


def must_stop(call: StepCall, why: str) -> None:
    """The step's `stopping` is set: raise if that is because the run must end (the owner's
    stop, a budget stop, its duration cap, a lost lease); return if it was an interrupt."""
    found = (
        Run.objects.filter(pk=call.run_id)
        .values_list("cancel_requested", "stop_reason", "fence", "max_seconds", "started_at")
        .first()
    )
    if found is None or found[2] != call.fence.token:
        raise LeaseLost(f"run {call.run_id}: lease taken over during a model step")
    cancel_requested, stop_reason, _fence, limit, started = found
    if cancel_requested:
        raise Stop(stop_reason or RunStatus.CANCELLED, why)
    if limit is not None and started and timezone.now() - started >= timedelta(seconds=limit):
        raise Stop(RunStatus.BUDGET_EXHAUSTED, f"max_seconds {limit} reached")
