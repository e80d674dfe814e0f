"""What a program sees of its run: journaled steps, durable waits, children, stop requests.

Every method is replay-safe: called again after a crash with the same arguments, in the same
order, it returns what was recorded instead of acting again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from agentos import telemetry
from kernel import bus, crashpoints, journal, runs, scheduler
from kernel.budgets import NO_COST, Cost
from kernel.exceptions import JournalMismatch, KernelError, Stop, Suspend
from kernel.journal import Fence, Record
from kernel.models import Effect, Run, RunStatus, StepKind, Wait, WaitKind, WaitState

# A reconciliation question answered by the owner: did the unfinished step take effect?
DONE, NOT_DONE = "done", "not_done"


@dataclass(frozen=True)
class StepCall:
    """What a step's executor gets: enough to be idempotent, to fence its effect
    (`kernel.leases.fenced(call.fence)`), and a way to notice a stop."""

    run_id: int
    seq: int
    idempotency_key: str
    request: Any
    replay: bool  # the intent was recorded before: a previous attempt may have acted
    stopping: threading.Event
    fence: Fence
    # Something arrived for the run while it executes (an owner message...): worth looking.
    # True on a replayed step, where we cannot know.
    woken: bool = True


@dataclass(frozen=True)
class Done:
    """An executor's answer: the step's result and what it cost."""

    result: Any
    cost: Cost = NO_COST


Executor = Callable[[StepCall], Done]


@dataclass(frozen=True)
class ReadStep:
    """One step of `RunContext.parallel`: a read, safe to run alongside others and again."""

    kind: str
    name: str
    request: Any
    execute: Executor


def _in_thread(execute: Executor, call: StepCall) -> Done:
    from django.db import connection

    try:
        return execute(call)
    finally:
        connection.close()  # this pool thread's own connection, if the executor opened one


Probe = Callable[[StepCall], Done | None]  # the recorded effect if it happened, else None


@dataclass
class RunContext:
    """What a program is given: its run, and journaled ways to act.

    - `step(kind, effect=, name=, request=, execute=, probe=, then=)`: one journaled step.
    - `parallel([ReadStep, ...])`: independent reads, executed at once.
    - `wait_human(question, expires_in=)`, `sleep(duration)`: durable waits (the run leaves its
      worker; expiry of a human wait is a refusal).
    - `spawn(program, input, caps=)`, `join(run_ids)`: child runs.
    Everything else here is bookkeeping for one execution of the program (fence, stop and
    interrupt requests from the lease keeper, the ledger's unbilled counters).
    """

    run: Run
    fence: Fence
    records: dict[int, Record]
    stopping: threading.Event = field(default_factory=threading.Event)
    # Set when the worker shuts down gracefully: the run parks at its next step boundary.
    draining: threading.Event = field(default_factory=threading.Event)
    stop_reason: str = ""
    interrupted: bool = False
    pausing: bool = False  # the owner paused the run: park at the next step boundary
    over_budget: str = ""  # the first cap a debit crossed: the run stops before its next step
    unbilled_turns: int = 0
    unbilled_tool_calls: int = 0
    billed_through: int = 0  # set from the run when the execution starts
    planned: set[int] = field(default_factory=set)  # intents this execution committed ahead
    daily_cap: int | None = None  # read at the first debit of this execution
    seq: int = 0
    traced: bool = False  # telemetry on: each step's span needs its start time
    deferred: journal.Deferred | None = None  # a free read's result, written with the next intent
    started_ns: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.billed_through = self.run.billed_through
        self.traced = telemetry.tracer() is not None

    @property
    def run_id(self) -> int:
        return self.fence.run_id

    @property
    def input(self) -> Any:
        return self.run.input

    # --- the generic step ------------------------------------------------------------------

    def step(
        self,
        kind: str,
        *,
        effect: str,
        name: str,
        request: Any,
        execute: Executor,
        probe: Probe | None = None,
        then: Callable[[Any], list[tuple[str, str, Any]]] | None = None,
    ) -> Any:
        """Run one journaled step and return its result.

        1. A recorded result is returned as recorded (after checking it is the same step).
        2. Otherwise, before anything runs: stop if asked to or over budget; write the intent.
        3. An intent without result means a previous attempt died mid-step; by effect class:
           read/model_call/idempotent_write run again (the latter with the same idempotency key),
           non_idempotent asks its probe, else the owner, and never retries blindly.
        4. Execute, then record the result with its cost in one transaction. `then(result)` may
           name the read steps (kind, name, request) that will follow, in order: their intents
           commit in that same transaction.
        """
        self.seq += 1
        seq = self.seq
        recorded = self._recorded(seq, kind, name, request)
        if recorded is not None and recorded.finished:
            return self._replayed(recorded)
        self.check_stop()
        woken = True
        if recorded is None:
            crashpoints.hit("before_intent_commit", run=self.run_id, seq=seq)
            woken = journal.record_intent(
                self.fence,
                seq=seq,
                kind=kind,
                effect=effect,
                name=name,
                request=request,
                prior=self._take_deferred(),
            )
            self.records[seq] = Record(seq, kind, effect, name, "", None, False, "")
            crashpoints.hit("after_intent_commit", run=self.run_id, seq=seq)
        call = self._call(seq, request, recorded=recorded is not None, woken=woken)
        if recorded is not None and effect == Effect.NON_IDEMPOTENT:
            settled = self._reconcile(call, probe)
            if settled is not None:
                return self._record(
                    call, kind, settled.done, settled.settled_by, executions=0, replayable=False
                )
        done = execute(call)
        crashpoints.hit("after_effect_before_result", run=self.run_id, seq=seq)
        planned = [
            (seq + offset, step_kind, step_name, step_request)
            for offset, (step_kind, step_name, step_request) in enumerate(
                then(done.result) if then else [], start=1
            )
        ]
        return self._record(
            call,
            kind,
            done,
            "executed",
            executions=1,
            replayable=effect == Effect.READ,
            planned=planned,
        )

    def parallel(self, steps: list[ReadStep]) -> list[Any]:
        """Independent `read` steps: intents in order, executed at once, results in order.

        Each step keeps its own seq, intent and result, so a crash mid-batch replays only the
        steps without a result (reads: safe to run again).
        """
        results: dict[int, Any] = {}
        pending: list[tuple[StepCall, ReadStep]] = []
        for spec in steps:
            self.seq += 1
            seq = self.seq
            recorded = self._recorded(seq, spec.kind, spec.name, spec.request)
            if recorded is not None and recorded.finished:
                results[seq] = self._replayed(recorded)
                continue
            self.check_stop()
            if recorded is None:
                crashpoints.hit("before_intent_commit", run=self.run_id, seq=seq)
                journal.record_intent(
                    self.fence,
                    seq=seq,
                    kind=spec.kind,
                    effect=Effect.READ,
                    name=spec.name,
                    request=spec.request,
                    prior=self._take_deferred(),
                )
                self.records[seq] = Record(
                    seq, spec.kind, Effect.READ, spec.name, "", None, False, ""
                )
                crashpoints.hit("after_intent_commit", run=self.run_id, seq=seq)
            call = self._call(seq, spec.request, recorded=recorded is not None)
            pending.append((call, spec))
        done: list[Done] = []
        if len(pending) == 1:  # nothing to overlap: no thread
            done = [pending[0][1].execute(pending[0][0])]
        elif pending:
            with ThreadPoolExecutor(min(len(pending), 8), thread_name_prefix="read") as pool:
                done = list(pool.map(lambda item: _in_thread(item[1].execute, item[0]), pending))
        for (call, spec), outcome in zip(pending, done, strict=True):
            crashpoints.hit("after_effect_before_result", run=self.run_id, seq=call.seq)
            results[call.seq] = self._record(call, spec.kind, outcome, "executed", executions=1)
        return [results[seq] for seq in sorted(results)]

    def _call(self, seq: int, request: Any, *, recorded: bool, woken: bool = True) -> StepCall:
        """What the executor of step `seq` gets. An intent this execution planned ahead is not
        a replay: no earlier attempt can have acted on it."""
        if self.traced:
            self.started_ns[seq] = time.time_ns()
        return StepCall(
            run_id=self.run_id,
            seq=seq,
            idempotency_key=journal.idempotency_key(self.run_id, seq),
            request=request,
            replay=recorded and seq not in self.planned,
            stopping=self.stopping,
            fence=self.fence,
            woken=woken,
        )

    def _recorded(self, seq: int, kind: str, name: str, request: Any) -> Record | None:
        recorded = self.records.get(seq)
        if recorded is None:
            return None
        if recorded.kind != kind or (
            recorded.request_hash
            and recorded.request_hash != journal.request_hash(kind, name, request)
        ):
            raise JournalMismatch(
                f"Run {self.run_id} step {seq}: the journal holds a {recorded.kind} step"
                f" {recorded.name!r}, the program now asks for a {kind} step {name!r}."
                " The program is not deterministic, or changed since the run started."
            )
        return recorded

    def _record(
        self,
        call: StepCall,
        kind: str,
        done: Done,
        settled_by: str,
        executions: int,
        *,
        replayable: bool = True,
        planned: list[tuple[int, str, str, Any]] | None = None,
    ) -> Any:
        """Record the result. A step that cost something carries the ledger debit, with the
        counters of the free steps before it; a free step's counters wait for that debit (or the
        end of the execution): one ledger write per costly step instead of one per step."""
        self._count(kind)
        # The ledger statement runs for a step that cost something, or that commits planned
        # intents; either way it moves the billing watermark, so it takes the counters along.
        costly = not done.cost.is_zero or bool(planned)
        self.flush_deferred()  # results are written in step order
        if not costly and replayable and settled_by == "executed":
            # A free read: its result rides on the next intent (one round trip less a turn).
            self.deferred = journal.Deferred(
                call.seq, done.result, settled_by, executions, timezone.now()
            )
            debit = None
        else:
            debit = self._write_result(
                call, done, settled_by, executions, costly, replayable, planned
            )
        return self._after_record(call, kind, done, settled_by, costly, planned, debit)

    def _write_result(
        self,
        call: StepCall,
        done: Done,
        settled_by: str,
        executions: int,
        costly: bool,
        replayable: bool,
        planned: list[tuple[int, str, str, Any]] | None,
    ) -> journal.Debit | None:
        return journal.record_result(
            self.fence,
            seq=call.seq,
            result=done.result,
            cost=done.cost,
            settled_by=settled_by,
            executions=executions,
            turns=self.unbilled_turns if costly else 0,
            tool_calls=self.unbilled_tool_calls if costly else 0,
            debit_ids=[*self.run.ancestors, self.run_id],
            mission_id=self.run.mission_id,
            mission_capped=self.run.mission.is_capped,
            replayable=replayable,
            planned=planned,
        )

    def _after_record(
        self,
        call: StepCall,
        kind: str,
        done: Done,
        settled_by: str,
        costly: bool,
        planned: list[tuple[int, str, str, Any]] | None,
        debit: journal.Debit | None,
    ) -> Any:
        for planned_seq, planned_kind, planned_name, _request in planned or []:
            self.records[planned_seq] = Record(
                planned_seq, planned_kind, Effect.READ, planned_name, "", None, False, ""
            )
            self.planned.add(planned_seq)
        if costly:
            self.unbilled_turns = self.unbilled_tool_calls = 0
            self.billed_through = call.seq
        name = self.records[call.seq].name if call.seq in self.records else ""
        self.records[call.seq] = Record(call.seq, kind, "", "", "", done.result, True, settled_by)
        crashpoints.hit("after_result_commit", run=self.run_id, seq=call.seq)
        if self.traced:
            telemetry.step(
                self.run,
                seq=call.seq,
                kind=kind,
                name=name,
                started_ns=self.started_ns.pop(call.seq, time.time_ns()),
                ended_ns=time.time_ns(),
                cost=done.cost,
                result=done.result,
                settled_by=settled_by,
            )
        self._after_step()
        if debit is not None:
            self._check_debit(debit)
        self._check_counters()
        return done.result

    def _count(self, kind: str) -> None:
        if kind == StepKind.MODEL_CALL:
            self.unbilled_turns += 1
        elif kind == StepKind.TOOL_CALL:
            self.unbilled_tool_calls += 1

    def _replayed(self, recorded: Record) -> Any:
        """A recorded result, counted again if the ledger has not counted it yet."""
        if recorded.seq > self.billed_through:
            self._count(recorded.kind)
        return recorded.result

    def _take_deferred(self) -> journal.Deferred | None:
        deferred, self.deferred = self.deferred, None
        return deferred

    def flush_deferred(self) -> None:
        """Write a held-back read result now (before any other write of this run's journal)."""
        deferred = self._take_deferred()
        if deferred is not None:
            journal.record_deferred(self.fence, deferred)

    def bill(self) -> None:
        """Put the free steps' counters in the ledger: when the execution ends or parks.
        A held-back result goes first: counters never cover a step without its result."""
        self.flush_deferred()
        if self.unbilled_turns or self.unbilled_tool_calls:
            last = max(seq for seq, record in self.records.items() if record.finished)
            journal.bill_counters(
                self.fence,
                seq=last,
                turns=self.unbilled_turns,
                tool_calls=self.unbilled_tool_calls,
                debit_ids=[*self.run.ancestors, self.run_id],
            )
            self.unbilled_turns = self.unbilled_tool_calls = 0
            self.billed_through = last

    def _check_counters(self) -> None:
        """This run's own turn and tool-call caps, exactly, from what it knows it has done."""
        for cap, spent, unbilled in (
            ("max_turns", self.run.turns, self.unbilled_turns),
            ("max_tool_calls", self.run.tool_calls, self.unbilled_tool_calls),
        ):
            limit = getattr(self.run, cap)
            if limit is not None and spent + unbilled >= limit and not self.over_budget:
                self.over_budget = f"run {self.run_id} reached {cap}"

    @dataclass(frozen=True)
    class _Settled:
        done: Done
        settled_by: str

    def _reconcile(self, call: StepCall, probe: Probe | None) -> RunContext._Settled | None:
        """Settle an unfinished non-idempotent step without acting twice; None: safe to act."""
        if probe is not None:
            found = probe(call)
            return RunContext._Settled(found, "probe") if found is not None else None
        wait = self._open_wait(
            call.seq,
            WaitKind.RECONCILE,
            {
                "question": "A step that cannot be safely repeated was interrupted. Did it take"
                " effect?",
                "step": call.seq,
                "request": call.request,
                "answers": {DONE: "it took effect (give its result)", NOT_DONE: "it did not"},
            },
            due_at=None,
        )
        answer = wait.answer if isinstance(wait.answer, dict) else {}
        if wait.state == WaitState.ANSWERED and answer.get("verdict") == DONE:
            return RunContext._Settled(Done(answer.get("result")), "owner")
        if wait.state == WaitState.ANSWERED and answer.get("verdict") == NOT_DONE:
            if not answer.get("acted_on"):
                # "It did not happen" holds for one attempt only. Committed before acting: if
                # this attempt dies too, the next one must ask again (make chaos found a step
                # applied twice when a stale verdict was reused after a second interruption).
                Wait.objects.filter(pk=wait.pk).update(answer={**answer, "acted_on": True})
                return None
            Wait.objects.filter(pk=wait.pk).update(
                state=WaitState.OPEN, answer=None, settled_at=None
            )
            journal.append_event(
                "wait.reopened",
                run_id=self.run_id,
                mission_id=self.run.mission_id,
                seq=call.seq,
                wait=wait.pk,
            )
        raise Suspend(None, f"owner verdict needed on step {call.seq}")

    # --- waits -----------------------------------------------------------------------------

    def wait_human(self, question: Any, *, expires_in: timedelta) -> Any:
        """Ask the owner and wait (durably) for the answer; expiry answers `{"refused": ...}`."""
        return self._wait_step(
            StepKind.WAIT_HUMAN, WaitKind.HUMAN, "owner", question, expires_in=expires_in
        )

    def sleep(self, duration: timedelta) -> Any:
        """A durable timer: the run leaves the worker and is claimed again when it is due."""
        return self._wait_step(StepKind.TIMER, WaitKind.TIMER, "timer", {}, expires_in=duration)

    def _wait_step(
        self, kind: str, wait_kind: str, name: str, question: Any, *, expires_in: timedelta
    ) -> Any:
        self.seq += 1
        seq = self.seq
        request = {"question": question, "seconds": expires_in.total_seconds()}
        recorded = self._recorded(seq, kind, name, request)
        if recorded is not None and recorded.finished:
            return recorded.result
        self.check_stop()
        if recorded is None:
            due = timezone.now() + expires_in
            crashpoints.hit("before_intent_commit", run=self.run_id, seq=seq)
            self.flush_deferred()
            journal.record_intent(
                self.fence,
                seq=seq,
                kind=kind,
                effect=Effect.READ,
                name=name,
                request=request,
                wait=(wait_kind, question, due),
            )
            self.records[seq] = Record(seq, kind, Effect.READ, name, "", None, False, "")
            if wait_kind == WaitKind.HUMAN:
                bus.ring("waits")  # the owner's open pages list what waits for them
        # After the wait row is committed (now, or by an attempt that died), before acting on it.
        crashpoints.hit("wait_recorded", run=self.run_id, seq=seq)
        wait = Wait.objects.get(run_id=self.run_id, seq=seq, kind=wait_kind)
        call = self._call(seq, request, recorded=recorded is not None)
        if wait.state == WaitState.ANSWERED:
            return self._record(call, kind, Done({"answer": wait.answer}), "owner", executions=0)
        if wait.due_at is not None and wait.due_at <= timezone.now():
            Wait.objects.filter(pk=wait.pk, state=WaitState.OPEN).update(
                state=WaitState.EXPIRED, settled_at=timezone.now()
            )
            result = (
                {"fired_at": wait.due_at.isoformat()}
                if wait_kind == WaitKind.TIMER
                else {"refused": True, "reason": "expired"}
            )
            return self._record(call, kind, Done(result), "expiry", executions=0)
        raise Suspend(wait.due_at, f"{wait_kind} wait on step {seq}")  # due_at wakes it

    def _open_wait(self, seq: int, kind: str, question: Any, *, due_at: datetime | None) -> Wait:
        # Its `wait.opened` event is written by the database with the row (a trigger), as for
        # every wait: no window where the wait exists and its event does not.
        wait, _created = Wait.objects.get_or_create(
            run_id=self.run_id,
            seq=seq,
            kind=kind,
            defaults={"question": question, "due_at": due_at},
        )
        return wait

    # --- children --------------------------------------------------------------------------

    def spawn(self, program: str, input: Any, *, caps: dict[str, Any] | None = None) -> int:
        """Start a child run (once, even if this step is replayed); return its id."""

        def create(call: StepCall) -> Done:
            child = runs.spawn_child(
                parent=self.run, seq=call.seq, program=program, input=input, caps=caps or {}
            )
            return Done({"run_id": child.pk})

        result = self.step(
            StepKind.SPAWN,
            effect=Effect.IDEMPOTENT_WRITE,
            name=program,
            request={"input": input, "caps": caps or {}},
            execute=create,
        )
        return int(result["run_id"])

    def join(self, run_ids: list[int]) -> dict[str, Any]:
        """Wait (durably) until every listed child has ended; return their status and output."""
        self.seq += 1
        seq = self.seq
        request = {"runs": run_ids}
        recorded = self._recorded(seq, StepKind.JOIN, "join", request)
        if recorded is not None and recorded.finished:
            return dict(recorded.result)
        self.check_stop()
        children = list(Run.objects.filter(pk__in=run_ids, parent_id=self.run_id))
        if len(children) != len(set(run_ids)):
            raise KernelError(f"Run {self.run_id} can only join its own children.")
        if recorded is None:
            crashpoints.hit("before_intent_commit", run=self.run_id, seq=seq)
            journal.record_intent(
                self.fence,
                prior=self._take_deferred(),
                seq=seq,
                kind=StepKind.JOIN,
                effect=Effect.READ,
                name="join",
                request=request,
            )
            self.records[seq] = Record(seq, StepKind.JOIN, Effect.READ, "join", "", None, False, "")
        if any(not child.is_terminal for child in children):
            raise Suspend(None, f"joining {len(children)} child run(s) on step {seq}")
        result = {
            str(child.pk): {"status": child.status, "output": child.output} for child in children
        }
        call = self._call(seq, request, recorded=False)
        return dict(self._record(call, StepKind.JOIN, Done(result), "executed", executions=1))

    # --- stops -----------------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Called by the lease renewer: interrupt the current step, stop before the next one."""
        self.stop_reason = reason or RunStatus.CANCELLED
        self.stopping.set()

    def interrupt(self) -> None:
        """Called by the lease renewer: end the current step now; the run goes on."""
        self.interrupted = True
        self.stopping.set()

    def _after_step(self) -> None:
        if self.interrupted and not self.stop_reason:
            self.interrupted = False
            self.stopping.clear()
            scheduler.clear_interrupt(self.fence)

    def check_stop(self) -> None:
        if self.draining.is_set():
            raise Suspend(timezone.now(), "worker shutting down")
        if self.pausing and not self.stop_reason:
            raise Suspend(None, "paused by the owner")
        if self.stop_reason:
            crashpoints.hit("cancel_seen", run=self.run_id)
            raise Stop(self.stop_reason or RunStatus.CANCELLED, "stop requested")
        limit = self.run.max_seconds
        started = self.run.started_at
        if limit is not None and started and timezone.now() - started >= timedelta(seconds=limit):
            raise Stop(RunStatus.BUDGET_EXHAUSTED, f"max_seconds {limit} reached")
        if self.over_budget:
            raise Stop(RunStatus.BUDGET_EXHAUSTED, self.over_budget)

    def _check_debit(self, debit: journal.Debit) -> None:
        """After a debit, note the first cap crossed (own, ancestor, mission or day)."""
        mine = debit.runs.get(self.run_id)
        if mine is not None and (cap := mine.crossed()):
            self.over_budget = f"run {self.run_id} reached {cap}"
            return
        for ancestor in self.run.ancestors:
            ledger = debit.runs.get(ancestor)
            if ledger is not None and (cap := ledger.crossed()):
                # The whole subtree of that ancestor stops, this run included.
                runs.request_stop(ancestor, reason=RunStatus.BUDGET_EXHAUSTED, by="kernel")
                self.over_budget = f"ancestor run {ancestor} reached {cap}"
                return
        if debit.mission is not None and (cap := debit.mission.crossed()):
            runs.stop_mission(self.run.mission_id, reason=RunStatus.BUDGET_EXHAUSTED)
            self.over_budget = f"mission {self.run.mission_id} reached {cap}"
            return
        if self.daily_cap is None:
            self.daily_cap = _daily_cap()  # once per execution: caps edits apply at next claim
        daily_cap = self.daily_cap or None
        spent_today = debit.day_usd_micros
        if daily_cap is not None and spent_today is not None and spent_today >= daily_cap:
            self.over_budget = "the global daily spend cap is reached"


def _daily_cap() -> int:
    """The global daily cap in micro-dollars; 0 when there is none."""
    from kernel.models import GlobalBudget

    return GlobalBudget.objects.values_list("daily_usd_micros", flat=True).first() or 0
