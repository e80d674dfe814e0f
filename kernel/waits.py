"""Durable waits: the steps a run leaves its worker for (an owner's answer, a timer, children to
end) and the rows they wait on, reconciliation questions included. A wait is a `Wait` row, never
a blocked process.

These are `RunContext` steps (`wait_human`, `sleep`, `join`): they start through its one intent
protocol (`RunContext._begin`) and record their results through it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from kernel import bus, crashpoints
from kernel.exceptions import KernelError, Suspend
from kernel.models import Effect, Run, StepKind, Wait, WaitKind, WaitState
from kernel.steps import Done

if TYPE_CHECKING:
    from kernel.context import RunContext


def ask(ctx: RunContext, question: Any, *, expires_in: timedelta) -> Any:
    """Ask the owner and wait (durably) for the answer; expiry answers `{"refused": ...}`."""
    return _wait(ctx, StepKind.WAIT_HUMAN, WaitKind.HUMAN, "owner", question, expires_in)


def sleep(ctx: RunContext, duration: timedelta) -> Any:
    """A durable timer: the run leaves the worker and is claimed again when it is due."""
    return _wait(ctx, StepKind.TIMER, WaitKind.TIMER, "timer", {}, duration)


def _wait(
    ctx: RunContext, kind: str, wait_kind: str, name: str, question: Any, expires_in: timedelta
) -> Any:
    request = {"question": question, "seconds": expires_in.total_seconds()}
    begun = ctx._begin(
        kind,
        effect=Effect.READ,
        name=name,
        request=request,
        wait=(wait_kind, question, expires_in),
        crash_after_intent=False,
    )
    if begun.finished is not None:
        return begun.finished.result
    if not begun.replay and wait_kind == WaitKind.HUMAN:
        bus.ring("waits")  # the owner's open pages list what waits for them
    # After the wait row is committed (now, or by an attempt that died), before acting on it.
    crashpoints.hit("wait_recorded", run=ctx.run_id, seq=begun.seq)
    wait = Wait.objects.get(run_id=ctx.run_id, seq=begun.seq, kind=wait_kind)
    call = ctx._call(begun.seq, request, recorded=begun.replay)
    if wait.state == WaitState.ANSWERED:
        return ctx._record(call, kind, Done({"answer": wait.answer}), "owner", executions=0)
    if wait.due_at is not None and wait.due_at <= timezone.now():
        Wait.objects.filter(pk=wait.pk, state=WaitState.OPEN).update(
            state=WaitState.EXPIRED, settled_at=timezone.now()
        )
        crashpoints.hit("wait_expired", run=ctx.run_id, seq=begun.seq)
        result = (
            {"fired_at": wait.due_at.isoformat()}
            if wait_kind == WaitKind.TIMER
            else {"refused": True, "reason": "expired"}
        )
        return ctx._record(call, kind, Done(result), "expiry", executions=0)
    raise Suspend(wait.due_at, f"{wait_kind} wait on step {begun.seq}")  # due_at wakes it


def join(ctx: RunContext, run_ids: list[int]) -> dict[str, Any]:
    """Wait (durably) until every listed child has ended; return their status and output."""
    request = {"runs": run_ids}
    children: list[Run] = []

    def ready() -> None:
        # Checked once the step is due, before its intent: a join of another run's children
        # is refused without a trace in the journal.
        children.extend(Run.objects.filter(pk__in=run_ids, parent_id=ctx.run_id))
        if len(children) != len(set(run_ids)):
            raise KernelError(f"Run {ctx.run_id} can only join its own children.")

    begun = ctx._begin(
        StepKind.JOIN,
        effect=Effect.READ,
        name="join",
        request=request,
        ready=ready,
        crash_after_intent=False,
    )
    if begun.finished is not None:
        return dict(begun.finished.result)
    if any(not child.is_terminal for child in children):
        raise Suspend(None, f"joining {len(children)} child run(s) on step {begun.seq}")
    result = {str(child.pk): {"status": child.status, "output": child.output} for child in children}
    call = ctx._call(begun.seq, request, recorded=False)
    return dict(ctx._record(call, StepKind.JOIN, Done(result), "executed", executions=1))


def open_wait(run_id: int, seq: int, kind: str, question: Any, *, due_at: datetime | None) -> Wait:
    """The wait of step `seq` of a run, made once (a reconciliation question, for one)."""
    # Its `wait.opened` event is written by the database with the row (a trigger), as for
    # every wait: no window where the wait exists and its event does not.
    wait, _created = Wait.objects.get_or_create(
        run_id=run_id,
        seq=seq,
        kind=kind,
        defaults={"question": question, "due_at": due_at},
    )
    return wait


def hold_step(
    run_id: int, seq: int, question: Any, *, due_at: datetime, kind: str = WaitKind.TIMER
) -> Wait:
    """A durable wait on step `seq`, begun and without a result, to run it again when it is
    settled: a timer due at `due_at`, or an owner's answer (`WaitKind.HUMAN`, expiring then).
    The run suspends meanwhile (`Suspend`), and its replay executes the step again.

    One row per step and kind, made once and reopened by each later hold (its `created_at` says
    when the step was first held); `release_step` settles a timer once the step got through."""
    wait, created = Wait.objects.get_or_create(
        run_id=run_id, seq=seq, kind=kind, defaults={"question": question, "due_at": due_at}
    )
    if not created:
        Wait.objects.filter(pk=wait.pk).update(
            question=question, due_at=due_at, state=WaitState.OPEN, answer=None, settled_at=None
        )
        wait.question, wait.due_at, wait.state, wait.answer = question, due_at, WaitState.OPEN, None
    if kind == WaitKind.HUMAN:
        bus.ring_on_commit("waits")  # the owner's open pages list what waits for them
    return wait


def step_hold(run_id: int, seq: int, kind: str = WaitKind.TIMER) -> Wait | None:
    """The hold of step `seq` (`hold_step`), if it was ever held."""
    return Wait.objects.filter(run_id=run_id, seq=seq, kind=kind).first()


def release_step(run_id: int, seq: int, kind: str = WaitKind.TIMER) -> None:
    """Settle the hold of step `seq`, if open: what it waited for is over (or past due)."""
    Wait.objects.filter(run_id=run_id, seq=seq, kind=kind, state=WaitState.OPEN).update(
        state=WaitState.EXPIRED, settled_at=timezone.now()
    )
