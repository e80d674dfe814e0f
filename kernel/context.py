"""What a program sees of its run: journaled steps, durable waits, children, stop requests.

Every method is replay-safe: called again after a crash with the same arguments, in the same
order, it returns what was recorded instead of acting again. Every step kind starts through one
intent protocol (`RunContext._begin`); waits are `kernel.waits`', budget enforcement is the
execution's `kernel.metering.Meter`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection
from django.utils import timezone

from agentos.core import reachability
from kernel import crashpoints, diskfull, journal, runs, scheduler, telemetry, waits
from kernel.debits import Debit
from kernel.exceptions import JournalMismatch, Stop, Suspend
from kernel.journal import Fence, Record
from kernel.metering import Meter
from kernel.models import Effect, Run, RunStatus, StepKind, Wait, WaitKind, WaitState

# Re-exported: programs, tools and the engine import these from here.
from kernel.steps import Done, Executor, Probe, ReadStep, StepCall, Stopping

__all__ = [
    "DONE",
    "NOT_DONE",
    "Begun",
    "Done",
    "Executor",
    "Probe",
    "ReadStep",
    "RunContext",
    "StepCall",
]

# A reconciliation question answered by the owner: did the unfinished step take effect?
DONE, NOT_DONE = "done", "not_done"


def _in_thread(execute: Executor, call: StepCall) -> Done:
    try:
        return execute(call)
    finally:
        connection.close()  # this pool thread's own connection, if the executor opened one


def _provider(request: Any) -> str | None:
    """The provider a model call's request names (its spend caps count by it), if any."""
    provider = request.get("provider") if isinstance(request, dict) else None
    return provider if isinstance(provider, str) else None


# Effect classes whose step does nothing but cost: its intent need not wait for its WAL flush
# (`journal._NO_FLUSH`).
_COST_ONLY = frozenset((Effect.READ, Effect.MODEL_CALL))


class Begun(NamedTuple):
    """A step past the intent protocol (`RunContext._begin`)."""

    seq: int
    finished: Record | None  # its result is in the journal: return it, do nothing else
    replay: bool  # its intent was committed by an earlier attempt, which may have acted
    woken: bool  # a wake-up arrived since the claim (True when the intent was not written now)


@dataclass
class RunContext:
    """What a program is given: its run, and journaled ways to act.

    - `step(kind, effect=, name=, request=, execute=, probe=, then=)`: one journaled step.
    - `parallel([ReadStep, ...])`: independent reads, executed at once.
    - `wait_human(question, expires_in=)`, `sleep(duration)`: durable waits (the run leaves its
      worker; expiry of a human wait is a refusal).
    - `spawn(program, input, caps=)`, `join(run_ids)`: child runs.
    Everything else here is bookkeeping for one execution of the program (fence, stop and
    interrupt requests from the lease keeper, the meter of unbilled counters and caps).
    """

    run: Run
    fence: Fence
    records: dict[int, Record]
    stopping: threading.Event = field(default_factory=Stopping)
    # Set when the worker shuts down gracefully: the run parks at its next step boundary.
    draining: threading.Event = field(default_factory=threading.Event)
    stop_reason: str = ""
    stop_why: str = ""  # what the run's error says when it stops (the owner's stop: nothing)
    interrupted: bool = False
    pausing: bool = False  # the owner paused the run: park at the next step boundary
    planned: set[int] = field(default_factory=set)  # intents this execution committed ahead
    seq: int = 0
    traced: bool = False  # telemetry on: each step's span needs its start time
    deferred: journal.Deferred | None = None  # a free step's result, written with the next intent
    started_ns: dict[int, int] = field(default_factory=dict)
    meter: Meter = field(init=False)

    def __post_init__(self) -> None:
        self.meter = Meter(self.run)
        self.traced = telemetry.tracer() is not None

    @property
    def run_id(self) -> int:
        return self.fence.run_id

    @property
    def input(self) -> Any:
        return self.run.input

    # --- the intent protocol ---------------------------------------------------------------

    def _begin(
        self,
        kind: str,
        *,
        effect: str,
        name: str,
        request: Any,
        wait: tuple[str, Any, timedelta] | None = None,
        ready: Callable[[], None] | None = None,
        crash_after_intent: bool = True,
    ) -> Begun:
        """Start the next step: the one way every step kind goes.

        1. Take the next seq; a step already in the journal must be this same step
           (`JournalMismatch` otherwise). If its result is recorded, stop here (`finished`).
        2. Stop if asked to or over budget (`check_stop`); then `ready()`, the step's own check
           before anything is written (a join's children).
        3. Without an intent yet: crash point `before_intent_commit`, commit the intent — with
           the held-back result of the free step before it (`prior`), or, for a wait (`wait`:
           its kind, question and time to expiry), with its `Wait` row instead — note it in
           `records`, crash point `after_intent_commit`.

        Crash points by step kind, as the chaos matrices (`kernel.proving.chaos`) aim at them:
        `step`, `parallel` and `spawn` hit `after_intent_commit`; waits and joins hit
        `intent_committed` instead, and waits then `wait_recorded`, after `_begin` and on every
        attempt (the crash sweep, `kernel.proving.sweep`, dies at each of them).
        """
        self.seq += 1
        seq = self.seq
        recorded = self._recorded(seq, kind, name, request)
        if recorded is not None and recorded.finished:
            return Begun(seq, recorded, True, True)
        self.check_stop()
        if kind == StepKind.MODEL_CALL:
            self.meter.check_provider(request)  # a provider past its spend cap is not called
        if ready is not None:
            ready()
        if recorded is not None:
            return Begun(seq, None, True, True)
        woken = True
        if wait is None:
            crashpoints.hit("before_intent_commit", run=self.run_id, seq=seq)
            woken = journal.record_intent(
                self.fence,
                seq=seq,
                kind=kind,
                effect=effect,
                name=name,
                request=request,
                prior=self._take_deferred(),
                flush=effect not in _COST_ONLY,
            )
        else:
            wait_kind, question, expires_in = wait
            due = timezone.now() + expires_in
            crashpoints.hit("before_intent_commit", run=self.run_id, seq=seq)
            # A wait's statement also inserts its row: the held-back result goes first, alone.
            self.flush_deferred()
            journal.record_intent(
                self.fence,
                seq=seq,
                kind=kind,
                effect=effect,
                name=name,
                request=request,
                wait=(wait_kind, question, due),
            )
        self.records[seq] = Record(seq, kind, effect, name, "", None, False, "")
        if crash_after_intent:
            crashpoints.hit("after_intent_commit", run=self.run_id, seq=seq)
        else:  # a wait's or a join's intent: its own crash points come later, if at all
            crashpoints.hit("intent_committed", run=self.run_id, seq=seq)
        return Begun(seq, None, False, woken)

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
        recorded = self.records.get(self.seq + 1)
        if recorded is not None and recorded.finished:
            # What a resume does for each step before the one it stopped at: `_begin`'s first
            # step, without its machinery (a 1,000-step journal goes through here 1,000 times).
            self.seq += 1
            self._recorded(self.seq, kind, name, request)
            return self._replayed(recorded)
        begun = self._begin(kind, effect=effect, name=name, request=request)
        if begun.finished is not None:
            return self._replayed(begun.finished)
        seq = begun.seq
        call = self._call(seq, request, recorded=begun.replay, woken=begun.woken)
        if begun.replay and effect == Effect.NON_IDEMPOTENT:
            settled = self._reconcile(call, probe)
            if settled is not None:
                return self._record(
                    call, kind, settled.done, settled.settled_by, executions=0, replayable=False
                )
        try:
            done = execute(call)
        except Exception as error:
            if not reachability.is_disk_full(error):
                raise
            diskfull.hold(self.run_id, seq, error)  # a durable wait; the replay runs it again
        if begun.replay:
            waits.release_step(self.run_id, seq)  # a hold it got through, if any
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
            # Safe to run again after a crash: its result may ride on the next intent.
            replayable=effect != Effect.NON_IDEMPOTENT,
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
            begun = self._begin(spec.kind, effect=Effect.READ, name=spec.name, request=spec.request)
            if begun.finished is not None:
                results[begun.seq] = self._replayed(begun.finished)
                continue
            # Not `begun.woken`: a batch of reads has no use for it (woken stays True).
            call = self._call(begun.seq, spec.request, recorded=begun.replay)
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

    # --- results ---------------------------------------------------------------------------

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
        self.meter.count(kind)
        # The ledger statement runs for a step that cost something, or that commits planned
        # intents; either way it moves the billing watermark, so it takes the counters along.
        costly = not done.cost.is_zero or bool(planned)
        self.flush_deferred()  # results are written in step order
        if not costly and replayable and settled_by == "executed":
            # A free step that is safe to run again (a read, an idempotent write, a model call
            # that cost nothing): its result rides on the next intent, one commit per step. A
            # crash before that intent runs it again, as its effect class allows (§7).
            self.deferred = journal.Deferred(
                call.seq, done.result, settled_by, executions, time.monotonic()
            )
            debit = None
        else:
            debit = self._write_result(
                call, kind, done, settled_by, executions, costly, replayable, planned
            )
        return self._after_record(call, kind, done, settled_by, costly, planned, debit)

    def _write_result(
        self,
        call: StepCall,
        kind: str,
        done: Done,
        settled_by: str,
        executions: int,
        costly: bool,
        replayable: bool,
        planned: list[tuple[int, str, str, Any]] | None,
    ) -> Debit | None:
        if not costly:  # nothing to debit: the ledger's arguments are not needed
            return journal.record_result(
                self.fence,
                seq=call.seq,
                result=done.result,
                cost=done.cost,
                settled_by=settled_by,
                executions=executions,
                replayable=replayable,
            )
        meter = self.meter
        return journal.record_result(
            self.fence,
            seq=call.seq,
            result=done.result,
            cost=done.cost,
            settled_by=settled_by,
            executions=executions,
            turns=meter.unbilled_turns,
            tool_calls=meter.unbilled_tool_calls,
            debit_ids=[*self.run.ancestors, self.run_id],
            account_id=self.run.account_id,
            account_capped=self.run.account.is_capped,
            replayable=replayable,
            planned=planned,
            ledgers=meter.tree_capped is not False,
            provider=_provider(call.request) if kind == StepKind.MODEL_CALL else None,
        )

    def _after_record(
        self,
        call: StepCall,
        kind: str,
        done: Done,
        settled_by: str,
        costly: bool,
        planned: list[tuple[int, str, str, Any]] | None,
        debit: Debit | None,
    ) -> Any:
        for planned_seq, planned_kind, planned_name, _request in planned or []:
            self.records[planned_seq] = Record(
                planned_seq, planned_kind, Effect.READ, planned_name, "", None, False, ""
            )
            self.planned.add(planned_seq)
        if costly:
            self.meter.billed(call.seq)
        if kind == StepKind.MODEL_CALL:
            self.meter.provider_paid(done.cost.usd_micros)
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
            self.meter.check_debit(debit)
        self.meter.check_counters()
        return done.result

    def _replayed(self, recorded: Record) -> Any:
        """A recorded result, counted again if the ledger has not counted it yet."""
        self.meter.count_replayed(recorded)
        return recorded.result

    def _take_deferred(self) -> journal.Deferred | None:
        deferred, self.deferred = self.deferred, None
        return deferred

    def flush_deferred(self) -> None:
        """Write a held-back result now (before any other write of this run's journal)."""
        deferred = self._take_deferred()
        if deferred is not None:
            journal.record_deferred(self.fence, deferred)

    def bill(self) -> None:
        """Put the free steps' counters in the ledger: when the execution ends or parks.
        A held-back result goes first: counters never cover a step without its result."""
        self.flush_deferred()
        self.meter.bill(self.fence, self.records)

    # --- reconciliation: an unfinished step that cannot be repeated blindly ------------------

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
                crashpoints.hit("verdict_marked", run=self.run_id, seq=call.seq)
                return None
            Wait.objects.filter(pk=wait.pk).update(
                state=WaitState.OPEN, answer=None, settled_at=None
            )
            journal.append_event(
                "wait.reopened",
                run_id=self.run_id,
                account_id=self.run.account_id,
                seq=call.seq,
                wait=wait.pk,
            )
        raise Suspend(None, f"owner verdict needed on step {call.seq}")

    # --- waits (kernel.waits) --------------------------------------------------------------

    def wait_human(self, question: Any, *, expires_in: timedelta) -> Any:
        """Ask the owner and wait (durably) for the answer; expiry answers `{"refused": ...}`."""
        return waits.ask(self, question, expires_in=expires_in)

    def sleep(self, duration: timedelta) -> Any:
        """A durable timer: the run leaves the worker and is claimed again when it is due."""
        return waits.sleep(self, duration)

    def _open_wait(self, seq: int, kind: str, question: Any, *, due_at: datetime | None) -> Wait:
        """The question `_reconcile` waits on (a row made once, `kernel.waits`)."""
        return waits.open_wait(self.run_id, seq, kind, question, due_at=due_at)

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
        return waits.join(self, run_ids)

    # --- stops -----------------------------------------------------------------------------

    def request_stop(self, reason: str, *, why: str = "") -> None:
        """Called by the lease renewer: interrupt the current step, stop before the next one.

        Every renewal relays the request again; only the first one signals the step (`stopping`
        calls the cuts of what cannot wait on it, `kernel.steps.Stopping`)."""
        if self.stop_reason:
            return
        self.stop_why = why
        self.stop_reason = reason or RunStatus.CANCELLED
        self.stopping.set()

    def interrupt(self) -> None:
        """Called by the lease renewer: end the current step now; the run goes on. Relayed again
        until the step ends, it signals the step once."""
        if self.interrupted:
            return
        self.interrupted = True
        self.stopping.set()

    def _after_step(self) -> None:
        if self.interrupted and not self.stop_reason:
            self.interrupted = False
            self.stopping.clear()
            scheduler.clear_interrupt(self.fence)

    def check_stop(self) -> None:
        """Before each step: park for a draining worker or a pause, stop when asked to, then
        the budget's own stops (time, caps crossed: the meter's)."""
        if self.draining.is_set():
            raise Suspend(timezone.now(), "worker shutting down")
        if self.pausing and not self.stop_reason:
            raise Suspend(None, "paused by the owner")
        if self.stop_reason:
            crashpoints.hit("cancel_seen", run=self.run_id)
            raise Stop(self.stop_reason or RunStatus.CANCELLED, self.stop_why or "stop requested")
        self.meter.check()
