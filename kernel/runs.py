"""Starting runs, stopping them, answering their waits: the kernel's entry points for others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from kernel import bus, journal, programs, scheduler
from kernel.budgets import CAP_FIELDS, validate_caps
from kernel.exceptions import KernelError
from kernel.models import TERMINAL, Account, Run, RunStatus, Step, Trust, Wait, WaitState

MAX_DEPTH = 3
# The answer of a wait ended because its run was stopped: `{STOPPED_MARK: stop reason}`.
STOPPED_MARK = scheduler.STOPPED_MARK


def start_run(
    *,
    account: Account,
    program: str,
    input: Any = None,  # the run's input, as the contract calls it
    caps: dict[str, Any] | None = None,
    parent: Run | None = None,
    spawned_by_seq: int | None = None,
    model: str = "",
    contract: dict[str, Any] | None = None,
    prompt_hash: str = "",
    tools_hash: str = "",
    workspace: str = "",
) -> Run:
    """Create a runnable run (a root, or a child of `parent`) and ring the workers."""
    if program not in programs.PROGRAMS:
        raise KernelError(f"No program named {program!r}.", code="unknown_program")
    clean_caps = validate_caps(caps or {})
    depth = 0 if parent is None else parent.depth + 1
    if depth > MAX_DEPTH:
        raise KernelError(
            f"Run tree depth is limited to {MAX_DEPTH}; run {parent.pk if parent else '?'} is at"
            f" depth {depth - 1}.",
            code="depth_exceeded",
        )
    if parent is not None and parent.account_id != account.pk:
        raise KernelError("A child run belongs to its parent's account.", code="invalid_input")
    with transaction.atomic():
        run = Run.objects.create(
            account=account,
            parent=parent,
            depth=depth,
            ancestors=[*parent.ancestors, parent.pk] if parent else [],
            spawned_by_seq=spawned_by_seq,
            program=program,
            input=input if input is not None else {},
            contract=contract or {},
            model=model,
            engine_version=programs.ENGINE_VERSION,
            prompt_hash=prompt_hash,
            tools_hash=tools_hash,
            workspace=workspace,
            status=RunStatus.QUEUED,
            runnable_at=timezone.now(),
            **clean_caps,
        )
        Run.objects.filter(pk=run.pk).update(root_id=parent.root_id if parent else run.pk)
        run.root_id = parent.root_id if parent else run.pk
        journal.append_event(
            "run.created",
            run_id=run.pk,
            account_id=account.pk,
            program=program,
            parent=parent.pk if parent else None,
        )
        scheduler.ring()
    return run


def spawn_child(*, parent: Run, seq: int, program: str, input: Any, caps: dict[str, Any]) -> Run:
    """The child of a spawn step: created once, found again when the step is replayed."""
    existing = Run.objects.filter(parent=parent, spawned_by_seq=seq).first()
    if existing is not None:
        return existing
    try:
        return start_run(
            account=parent.account,
            program=program,
            input=input,
            caps=caps,
            parent=parent,
            spawned_by_seq=seq,
        )
    except IntegrityError:  # created meanwhile by a zombie of this very step
        return Run.objects.get(parent=parent, spawned_by_seq=seq)


def _trust(by: str) -> Trust:
    """The owner acts from the console ("owner") or through one of their API tokens
    ("token:<name>"); an outside agent through A2A ("a2a:<token name>") is the Web's, whatever
    token it holds; anything else acting is the system."""
    if by.startswith("a2a:"):
        return Trust.WEB
    return Trust.OWNER if by == "owner" or by.startswith("token:") else Trust.SYSTEM


def request_stop(run_id: int, *, reason: str = RunStatus.CANCELLED, by: str = "owner") -> int:
    """Stop a run and all its descendants; return how many runs were asked to stop.

    Waiting or queued runs are woken so that a worker ends them; an executing one's worker is
    notified at commit (`kernel_run_steered`) and interrupts its step.
    """
    if reason not in (RunStatus.CANCELLED, RunStatus.BUDGET_EXHAUSTED):
        raise KernelError(f"A run stops as cancelled or budget_exhausted, not {reason!r}.")
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            raise KernelError(f"No run {run_id}.", code="not_found", status=404)
        subtree = Run.objects.filter(pk=run_id) | Run.objects.filter(ancestors__contains=[run_id])
        ids = list(
            subtree.exclude(status__in=TERMINAL)
            .exclude(cancel_requested=True)
            .values_list("pk", flat=True)
        )
        # A paused run is not claimed: unpause it so that a worker comes to end it.
        Run.objects.filter(pk__in=ids).update(
            cancel_requested=True, stop_reason=reason, paused=False
        )
        # Their open waits end with them, in this transaction: nobody is asked to answer for a
        # run that will not go on (approvals and questions are these rows, `approvals.models`
        # reads the mark). The row locks order this with `answer_wait`: one of them wins.
        closed = Wait.objects.filter(run_id__in=ids, state=WaitState.OPEN).update(
            state=WaitState.EXPIRED, answer={STOPPED_MARK: reason}, settled_at=timezone.now()
        )
        journal.append_event(
            "run.stop_requested",
            run_id=run_id,
            account_id=run.account_id,
            trust=_trust(by),
            reason=reason,
            runs=ids,
            by=by,
        )
        if ids:
            scheduler.wake(ids)
        if closed:
            bus.ring_on_commit("waits")
    return len(ids)


@dataclass(frozen=True)
class Halted:
    """What `halt_all` did: the runs asked to stop, and the leases it took back."""

    stopped: list[int]
    leases_revoked: int


def halt_all(*, by: str = "owner") -> Halted:
    """Stop every unfinished run tree and take every lease back, in one transaction.

    Each tree stops as `request_stop` stops it (its open waits closed, its workers notified);
    then every lease still held is voided by a fence bump, so a worker still executing — even
    one stuck in a step that ignores the stop — can write nothing more (`LeaseLost`), and the
    run, claimable at once, is ended `cancelled` by the next worker that takes it.
    """
    with transaction.atomic():
        roots = list(
            Run.objects.filter(parent__isnull=True)
            .exclude(status__in=TERMINAL)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        for root in roots:
            request_stop(root, reason=RunStatus.CANCELLED, by=by)
        stopped = list(
            Run.objects.exclude(status__in=TERMINAL)
            .filter(cancel_requested=True)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        revoked = (
            Run.objects.exclude(status__in=TERMINAL)
            .filter(lease_expires_at__isnull=False)
            .update(fence=F("fence") + 1, lease_expires_at=None, runnable_at=timezone.now())
        )
        journal.append_event(
            "kernel.halted", trust=_trust(by), runs=stopped, leases_revoked=revoked, by=by
        )
        scheduler.ring()
    return Halted(stopped=stopped, leases_revoked=revoked)


def request_interrupt(run_id: int, *, by: str = "owner") -> None:
    """Interrupt the step the run is executing (a tool that runs too long, the wrong command);
    the run itself goes on. Its worker is notified at commit (`kernel_run_steered`)."""
    with transaction.atomic():
        updated = (
            Run.objects.filter(pk=run_id)
            .exclude(status__in=TERMINAL)
            .update(interrupt_requested=True)
        )
        if not updated:
            raise KernelError(
                f"No unfinished run {run_id} to interrupt.", code="not_found", status=404
            )
        journal.append_event(
            "run.interrupt_requested",
            run_id=run_id,
            trust=_trust(by),
            by=by,
        )


def pause_run(run_id: int, *, by: str = "owner") -> Run:
    """Pause a run: no worker claims it until it is resumed; if one is executing it, the step
    under way finishes and the run parks before the next (its worker is notified at commit)."""
    return _set_paused(run_id, paused=True, by=by)


def resume_run(run_id: int, *, by: str = "owner") -> Run:
    """Resume a paused run where it stopped."""
    return _set_paused(run_id, paused=False, by=by)


def _set_paused(run_id: int, *, paused: bool, by: str) -> Run:
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            raise KernelError(f"No run {run_id}.", code="not_found", status=404)
        if run.is_terminal:
            raise KernelError(
                f"Run {run_id} has ended ({run.status}); it cannot be paused or resumed.",
                code="already_ended",
                status=409,
            )
        if run.paused == paused:
            return run  # already so: pausing twice is not an error
        run.paused = paused
        run.save(update_fields=["paused"])
        journal.append_event(
            "run.paused" if paused else "run.resumed",
            run_id=run_id,
            account_id=run.account_id,
            trust=_trust(by),
            by=by,
        )
        if not paused:
            scheduler.wake([run_id])
    return run


def fork_run(run_id: int, *, at_seq: int, by: str = "owner") -> Run:
    """A new root run of the same program and input whose first `at_seq` steps are the source's
    recorded ones: replay returns them (no model is asked again), and it goes its own way after.

    The copied steps cost and count nothing here: the source run paid for them. Children
    spawned in the copied steps stay the source's; a program that keeps a workspace makes the
    fork its own (the agent engine does, from its checkpoints).
    """
    source = Run.objects.select_related("account").filter(pk=run_id).first()
    if source is None:
        raise KernelError(f"No run {run_id}.", code="not_found", status=404)
    if at_seq < 1:
        raise KernelError("A fork starts after step 1 or later.", code="invalid_input")
    steps = list(Step.objects.filter(run=source, seq__lte=at_seq).order_by("seq"))
    if len(steps) < at_seq or steps[-1].seq != at_seq:
        raise KernelError(f"Run {run_id} has no step {at_seq}.", code="not_found", status=404)
    unfinished = [step.seq for step in steps if step.finished_at is None]
    if unfinished:
        raise KernelError(
            f"Step {unfinished[0]} of run {run_id} has no result yet; fork from a recorded step.",
            code="not_recorded",
            status=409,
        )
    with transaction.atomic():
        fork = start_run(
            account=source.account,
            program=source.program,
            input=source.input,
            model=source.model,
            contract={**source.contract, "forked_from": {"run": run_id, "seq": at_seq}},
            prompt_hash=source.prompt_hash,
            tools_hash=source.tools_hash,
            caps={
                name: getattr(source, name)
                for name in (*CAP_FIELDS, "max_seconds")
                if getattr(source, name) is not None
            },
        )
        # The copied steps are the source's, paid and counted there: this run's counters
        # (turns, tool calls, hence its caps and its account's totals) start after them.
        Run.objects.filter(pk=fork.pk).update(billed_through=at_seq)
        Step.objects.bulk_create(
            Step(
                run=fork,
                seq=step.seq,
                kind=step.kind,
                effect=step.effect,
                name=step.name,
                request=step.request,
                request_hash=step.request_hash,
                started_at=step.started_at,
                result=step.result,
                finished_at=step.finished_at,
                settled_by="forked",
                executions=0,
            )
            for step in steps
        )
        journal.append_event(
            "run.forked",
            run_id=fork.pk,
            account_id=fork.account_id,
            trust=_trust(by),
            source=run_id,
            seq=at_seq,
            by=by,
        )
    return fork


def stop_descendants(run_id: int, *, reason: str) -> int:
    """A run stopped by its own cap (its wall time, a cap its debit crossed) takes its unfinished
    sub-agents with it: nobody would read what they go on to do. Return how many were asked."""
    live = Run.objects.filter(ancestors__contains=[run_id]).exclude(status__in=TERMINAL)
    if not live.exclude(cancel_requested=True).exists():
        return 0
    return request_stop(run_id, reason=reason, by="kernel") - 1


def stop_account(account_id: int, *, reason: str = RunStatus.CANCELLED, by: str = "kernel") -> int:
    """Stop every unfinished run tree of an account (its budget is spent, or its owner says so)."""
    roots = Run.objects.filter(account_id=account_id, parent__isnull=True).exclude(
        status__in=TERMINAL
    )
    return sum(
        request_stop(root, reason=reason, by=by) for root in roots.values_list("pk", flat=True)
    )


def answer_wait(wait_id: int, *, answer: Any, by: str = "owner") -> Wait:
    """Answer an open wait (owner question, reconciliation verdict) and wake its run."""
    with transaction.atomic():
        wait = Wait.objects.select_for_update().filter(pk=wait_id).first()
        if wait is None:
            raise KernelError(f"No wait {wait_id}.", code="not_found", status=404)
        if wait.state != WaitState.OPEN:
            raise KernelError(
                f"Wait {wait_id} is already {wait.state}; it cannot be answered again.",
                code="already_settled",
                status=409,
            )
        if wait.due_at is not None and wait.due_at <= timezone.now():
            raise KernelError(
                f"Wait {wait_id} expired at {wait.due_at.isoformat()}; expiry means refusal.",
                code="expired",
                status=409,
            )
        wait.state = WaitState.ANSWERED
        wait.answer = answer
        wait.settled_at = timezone.now()
        wait.save(update_fields=["state", "answer", "settled_at"])
        journal.append_event(
            "wait.answered",
            run_id=wait.run_id,
            seq=wait.seq,
            trust=_trust(by),
            wait_kind=wait.kind,
            by=by,
            answer=answer,
        )
        scheduler.wake([wait.run_id])
        bus.ring_on_commit("waits")
    return wait
