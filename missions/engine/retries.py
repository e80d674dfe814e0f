"""Waiting before a model request is retried: a wait that ends at once when the step must stop.

A provider's transient error (overloaded, rate limited) is retried within the same model step
after a backoff of up to a minute. Nothing is journaled meanwhile, so the wait must end the
moment the step's `stopping` event is set (by the lease keeper), and then say why it ended:
a stop request ends the run now, a lost lease ends this execution, and an owner's interrupt only
cuts the wait short (the request is sent again at once).
"""

from __future__ import annotations

from kernel.context import StepCall
from kernel.exceptions import LeaseLost, Stop
from kernel.models import Run, RunStatus

MAX_BACKOFF_SECONDS = 60.0


def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """The provider's `retry-after` if it gave one, else exponential; at most a minute."""
    return min(retry_after or 2**attempt, MAX_BACKOFF_SECONDS)


def wait_before_retry(call: StepCall, seconds: float) -> None:
    """Sleep `seconds` unless the step is asked to stop first; raise if the run must end."""
    if not call.stopping.wait(seconds):
        return
    state = Run.objects.filter(pk=call.run_id).values_list(
        "cancel_requested", "stop_reason", "fence"
    )
    found = state.first()
    if found is None or found[2] != call.fence.token:
        raise LeaseLost(f"run {call.run_id}: lease taken over during a model retry wait")
    cancel_requested, stop_reason, _fence = found
    if cancel_requested:
        raise Stop(stop_reason or RunStatus.CANCELLED, "stopped while waiting to retry the model")
