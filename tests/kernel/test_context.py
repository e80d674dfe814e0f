"""What a program's steps do around their journal writes: crash points and SQL statements.

The chaos harness kills workers at named crash points, and `make bench` prices each statement of
a step: this trace pins both, for every step kind, fresh, replayed and resumed after a death
mid-step. A change to `kernel.context` (or the modules it composes) that moves a crash point or
adds a round trip shows up here, before the chaos matrix or the benchmark has to find it.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from kernel import crashpoints, runs, statements
from kernel.budgets import NO_COST, Cost
from kernel.context import Done, ReadStep, RunContext, StepCall
from kernel.models import Effect, Run, RunStatus, StepKind, Wait
from kernel.programs import PROGRAMS, Outcome
from kernel.worker import Worker
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db(transaction=True)

# ("mark", label, statements since the previous mark) and (crash point, seq), in order.
TRACE: list[tuple[Any, ...]] = []
DIED: set[str] = set()
_counting = threading.local()


def _statements() -> int:
    return int(getattr(_counting, "n", 0))


def mark(label: str) -> None:
    TRACE.append(("mark", label, _statements()))
    _counting.n = 0


def dies_once(name: str, result: Any, cost: Cost = NO_COST) -> Any:
    """An executor whose worker dies after its effect, the first time only."""

    def execute(call: StepCall) -> Done:
        if name not in DIED:
            DIED.add(name)
            raise SystemExit(f"the worker died during {name}")
        return Done(result, cost)

    return execute


def leaf(ctx: RunContext) -> Outcome:
    return Outcome(output="leaf")


def every_kind(ctx: RunContext) -> Outcome:
    """One step of each kind, with the held-back read results and planned intents between."""
    _counting.n = 0
    read = StepKind.TOOL_CALL
    ctx.step(
        StepKind.MODEL_CALL,
        effect=Effect.MODEL_CALL,
        name="model",
        request={},
        execute=dies_once("model", {"text": "t"}, Cost(input_tokens=3, usd_micros=5)),
    )
    mark("model_call")
    ctx.step(
        read,
        effect=Effect.READ,
        name="plan",
        request={},
        execute=lambda call: Done({"planned": 2}),
        then=lambda result: [(read, "p1", {"i": 1}), (read, "p2", {"i": 2})],
    )
    mark("read with then")
    ctx.parallel(
        [
            ReadStep(read, "p1", {"i": 1}, lambda call: Done({"p": 1})),
            ReadStep(read, "p2", {"i": 2}, lambda call: Done({"p": 2})),
        ]
    )
    mark("parallel (planned)")
    ctx.parallel(
        [
            ReadStep(read, "q1", {"i": 1}, lambda call: Done({"q": 1})),
            ReadStep(read, "q2", {"i": 2}, lambda call: Done({"q": 2})),
        ]
    )
    mark("parallel")
    ctx.step(read, effect=Effect.READ, name="free", request={}, execute=lambda c: Done(1))
    mark("free read")
    ctx.step(
        read,
        effect=Effect.IDEMPOTENT_WRITE,
        name="write",
        request={},
        execute=dies_once("write", {"written": True}),
    )
    mark("idempotent_write")
    ctx.step(
        read,
        effect=Effect.NON_IDEMPOTENT,
        name="send",
        request={},
        execute=dies_once("send", {"sent": True}),
        probe=lambda call: Done({"sent": "probed"}),
    )
    mark("non_idempotent")
    child = ctx.spawn("test.leaf", {})
    mark("spawn")
    ctx.step(read, effect=Effect.READ, name="free", request={"j": 1}, execute=lambda c: Done(2))
    mark("free read")
    ctx.join([child])
    mark("join")
    ctx.step(read, effect=Effect.READ, name="free", request={"j": 2}, execute=lambda c: Done(3))
    mark("free read")
    ctx.sleep(timedelta(0))
    mark("sleep")
    ctx.wait_human({"ok?": True}, expires_in=timedelta(hours=1))
    mark("wait_human")
    return Outcome(output="done")


PROGRAMS.add("test.every_kind", every_kind)
PROGRAMS.add("test.leaf", leaf)


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> None:
    TRACE.clear()
    DIED.clear()
    main = threading.get_ident()
    execute = psycopg.Cursor.execute

    def counted(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == main:  # the program's thread, not a lease keeper
            _counting.n = _statements() + 1
        return execute(self, *args, **kwargs)

    def hit(point: str, *, run: int, seq: int = 0) -> None:
        TRACE.append((point, run, seq))

    send = statements.send

    def sent(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == main:
            _counting.n = _statements() + 1
        return send(*args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    monkeypatch.setattr(statements, "send", sent)  # the journal's hot path, below the cursor
    monkeypatch.setattr(crashpoints, "hit", hit)


def work() -> list[str]:
    try:
        return Worker(lease_seconds=30).run_until_idle()
    except SystemExit:
        Run.objects.update(lease_expires_at=None)  # the dead worker's lease: over at once
        return ["died"]


def test_it_keeps_each_step_kinds_crash_points_and_statements(traced: None) -> None:
    run = start("test.every_kind")

    executions = [work() for _ in range(4)]
    runs.answer_wait(Wait.objects.get(run=run, kind="human").pk, answer={"ok": True})
    executions.append(work())

    assert executions == [
        ["died"],
        ["died"],
        ["died"],
        ["waiting", "done", "waiting"],
        ["done"],
    ]
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE
    trace = [
        entry if entry[0] == "mark" else (entry[0], entry[2])
        for entry in TRACE
        if entry[0] == "mark" or entry[1] == run.pk  # the child's own points aside
    ]
    assert trace == EXPECTED


EXPECTED: list[tuple[Any, ...]] = [
    ("claim_locked", 0),
    ("claim_committed", 0),
    ("run_loaded", 0),
    ("before_intent_commit", 1),
    ("after_intent_commit", 1),
    ("claim_locked", 0),
    ("claim_committed", 0),
    ("run_loaded", 0),
    ("after_effect_before_result", 1),
    ("after_result_commit", 1),
    ("mark", "model_call", 3),  # its replay settles a full-disk hold, if any (kernel.diskfull)
    ("before_intent_commit", 2),
    ("after_intent_commit", 2),
    ("after_effect_before_result", 2),
    ("after_result_commit", 2),
    ("mark", "read with then", 2),
    ("after_effect_before_result", 3),
    ("after_result_commit", 3),
    ("after_effect_before_result", 4),
    ("deferred_committed", 3),
    ("after_result_commit", 4),
    ("mark", "parallel (planned)", 1),
    ("before_intent_commit", 5),
    ("after_intent_commit", 5),
    ("before_intent_commit", 6),
    ("after_intent_commit", 6),
    ("after_effect_before_result", 5),
    ("after_result_commit", 5),
    ("after_effect_before_result", 6),
    ("deferred_committed", 5),
    ("after_result_commit", 6),
    ("mark", "parallel", 3),
    ("before_intent_commit", 7),
    ("after_intent_commit", 7),
    ("after_effect_before_result", 7),
    ("after_result_commit", 7),
    ("mark", "free read", 1),
    ("before_intent_commit", 8),
    ("after_intent_commit", 8),
    ("claim_locked", 0),
    ("claim_committed", 0),
    ("run_loaded", 0),
    ("mark", "model_call", 0),
    ("mark", "read with then", 0),
    ("mark", "parallel (planned)", 0),
    ("mark", "parallel", 0),
    ("mark", "free read", 0),
    ("after_effect_before_result", 8),
    ("after_result_commit", 8),
    # A replay, as above; its result rides on the next intent (one commit per step).
    ("mark", "idempotent_write", 1),
    ("before_intent_commit", 9),
    ("after_intent_commit", 9),
    ("claim_locked", 0),
    ("claim_committed", 0),
    ("run_loaded", 0),
    ("mark", "model_call", 0),
    ("mark", "read with then", 0),
    ("mark", "parallel (planned)", 0),
    ("mark", "parallel", 0),
    ("mark", "free read", 0),
    ("mark", "idempotent_write", 0),
    ("after_result_commit", 9),
    ("mark", "non_idempotent", 1),
    ("before_intent_commit", 10),
    ("after_intent_commit", 10),
    ("after_effect_before_result", 10),
    ("after_result_commit", 10),
    ("mark", "spawn", 6),  # the child's row; the spawn's own result rides on the next intent
    ("before_intent_commit", 11),
    ("after_intent_commit", 11),
    ("after_effect_before_result", 11),
    ("after_result_commit", 11),
    ("mark", "free read", 1),
    ("before_intent_commit", 12),
    ("intent_committed", 12),
    ("counters_billed", 11),
    ("suspend_committed", 0),
    ("claim_locked", 0),
    ("claim_committed", 0),
    ("run_loaded", 0),
    ("mark", "model_call", 0),
    ("mark", "read with then", 0),
    ("mark", "parallel (planned)", 0),
    ("mark", "parallel", 0),
    ("mark", "free read", 0),
    ("mark", "idempotent_write", 0),
    ("mark", "non_idempotent", 0),
    ("mark", "spawn", 0),
    ("mark", "free read", 0),
    ("after_result_commit", 12),
    ("mark", "join", 1),
    ("before_intent_commit", 13),
    ("after_intent_commit", 13),
    ("after_effect_before_result", 13),
    ("after_result_commit", 13),
    ("mark", "free read", 1),
    ("before_intent_commit", 14),
    ("deferred_committed", 13),
    ("intent_committed", 14),
    ("wait_recorded", 14),
    ("wait_expired", 14),
    ("after_result_commit", 14),
    ("mark", "sleep", 5),
    ("before_intent_commit", 15),
    ("intent_committed", 15),
    ("wait_recorded", 15),
    ("counters_billed", 14),
    ("suspend_committed", 0),
    ("claim_locked", 0),
    ("claim_committed", 0),
    ("run_loaded", 0),
    ("mark", "model_call", 0),
    ("mark", "read with then", 0),
    ("mark", "parallel (planned)", 0),
    ("mark", "parallel", 0),
    ("mark", "free read", 0),
    ("mark", "idempotent_write", 0),
    ("mark", "non_idempotent", 0),
    ("mark", "spawn", 0),
    ("mark", "free read", 0),
    ("mark", "join", 0),
    ("mark", "free read", 0),
    ("mark", "sleep", 0),
    ("wait_recorded", 15),
    ("after_result_commit", 15),
    ("mark", "wait_human", 2),
    ("before_finish", 0),
    ("finish_committed", 0),
]
