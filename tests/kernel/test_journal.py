"""The journal's promises: one intent, one result, fenced writes, recorded results replayed."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection
from django.utils import timezone

from kernel import context, journal, scheduler, statements
from kernel.budgets import Cost
from kernel.context import Done, RunContext, StepCall
from kernel.exceptions import JournalMismatch, KernelError, LeaseLost
from kernel.journal import Fence
from kernel.models import Effect, Run, Step, StepKind
from kernel.programs import PROGRAMS, Outcome
from kernel.worker import Worker
from tests.kernel.factories import make_mission, start

pytestmark = pytest.mark.django_db(transaction=True)

CALLS: list[int] = []
EXPLODED: set[int] = set()


def counting(ctx: RunContext) -> Outcome:
    """Three read steps whose executor counts its calls; the second raises once if asked."""
    results = []
    for index in range(3):

        def execute(call: StepCall, index: int = index) -> Done:
            CALLS.append(index)
            if ctx.input.get("explode_at") == index and ctx.run_id not in EXPLODED:
                EXPLODED.add(ctx.run_id)
                raise ConnectionResetError("the worker's connection dropped")
            return Done({"i": index})

        results.append(
            ctx.step(
                StepKind.TOOL_CALL,
                effect=Effect.READ,
                name="count",
                request={"i": index},
                execute=execute,
            )
        )
    return Outcome(output=results)


PROGRAMS.add("test.counting", counting)


def claim(run: Run) -> Fence:
    found = scheduler.claim_next_run(worker="test", lease_seconds=30)
    assert found is not None
    assert found.fence.run_id == run.pk
    return found.fence


def test_it_refuses_an_unknown_step_kind() -> None:
    fence = claim(start("chaos.noop"))

    with pytest.raises(KernelError, match="Unknown step kind 'dance'"):
        journal.record_intent(fence, seq=1, kind="dance", effect="read", name="x", request={})

    assert not Step.objects.exists()


def test_it_refuses_an_unknown_effect_class() -> None:
    fence = claim(start("chaos.noop"))

    with pytest.raises(KernelError, match="Unknown effect class 'maybe'"):
        journal.record_intent(fence, seq=1, kind="tool_call", effect="maybe", name="x", request={})


def test_it_refuses_a_result_for_a_step_with_no_intent() -> None:
    fence = claim(start("chaos.noop"))

    with pytest.raises(KernelError, match="has no intent") as refused:
        journal.record_result(fence, seq=1, result={}, cost=Cost())

    assert refused.value.code == "no_intent"


def test_it_refuses_a_second_result_and_keeps_the_first() -> None:
    fence = claim(start("chaos.noop"))
    journal.record_intent(fence, seq=1, kind="tool_call", effect="read", name="x", request={})
    journal.record_result(fence, seq=1, result={"first": True}, cost=Cost())

    with pytest.raises(KernelError, match="already has a result") as refused:
        journal.record_result(fence, seq=1, result={"second": True}, cost=Cost(usd_micros=5))

    assert refused.value.code == "duplicate_result"
    step = Step.objects.get()
    assert step.result == {"first": True}
    assert Run.objects.get().usd_micros == 0


def test_it_refuses_a_second_intent_for_a_step() -> None:
    fence = claim(start("chaos.noop"))
    journal.record_intent(fence, seq=1, kind="tool_call", effect="read", name="x", request={})

    with pytest.raises(KernelError, match="already has an intent"):
        journal.record_intent(fence, seq=1, kind="tool_call", effect="read", name="x", request={})


def test_it_refuses_every_write_with_a_stale_fence() -> None:
    run = start("chaos.noop")
    stale = claim(run)
    journal.record_intent(stale, seq=1, kind="tool_call", effect="read", name="x", request={})
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)  # the lease ran out
    fresh = claim(run)
    assert fresh.token == stale.token + 1

    with pytest.raises(LeaseLost):
        journal.record_intent(stale, seq=2, kind="tool_call", effect="read", name="x", request={})
    with pytest.raises(LeaseLost):
        journal.record_result(stale, seq=1, result={"zombie": True}, cost=Cost(usd_micros=9))
    with pytest.raises(LeaseLost):
        scheduler.renew_lease(stale, lease_seconds=30)
    with pytest.raises(LeaseLost):
        scheduler.finish(stale, status="done")

    assert list(Step.objects.values_list("seq", "result")) == [(1, None)]
    assert Run.objects.get().status == "running"
    journal.record_result(fresh, seq=1, result={"owner": True}, cost=Cost())


def test_it_returns_recorded_results_without_executing_again() -> None:
    CALLS.clear()
    run = start("test.counting", {"explode_at": 1})
    worker = Worker(lease_seconds=30)

    assert worker.run_until_idle() == ["failed"]  # the program did not handle the error

    # Resume the same journal under a new claim: step 0 is recorded, step 1 has only its intent.
    Run.objects.filter(pk=run.pk).update(
        status="running", runnable_at=run.created_at, finished_at=None
    )
    CALLS.clear()
    fence = claim(run)
    context = RunContext(run=Run.objects.get(pk=run.pk), fence=fence, records=journal.load(run.pk))
    outcome = counting(context)

    assert CALLS == [1, 2]  # step 0 came from the journal; the read step 1 was replayed
    assert outcome.output == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert Step.objects.get(run=run, seq=1).executions == 1


def test_it_detects_a_program_that_changed_since_the_run_started() -> None:
    run = start("test.counting")
    Worker(lease_seconds=30).run_until_idle()
    Step.objects.filter(run=run, seq=2).update(request_hash="0" * 64)
    Run.objects.filter(pk=run.pk).update(status="running", runnable_at=run.created_at)
    fence = claim(run)
    context = RunContext(run=Run.objects.get(pk=run.pk), fence=fence, records=journal.load(run.pk))

    with pytest.raises(JournalMismatch, match="not deterministic"):
        counting(context)


def test_it_reads_a_whole_journal_back_in_order() -> None:
    run = start("chaos.noop", {"steps": 50})
    Worker(lease_seconds=30).run_until_idle()

    records = journal.load(run.pk)

    assert len(records) == 50
    assert list(records) == list(range(1, 51))
    assert all(record.finished for record in records.values())


def test_it_keeps_one_intent_per_step_in_the_database_itself() -> None:
    run = start("chaos.noop", {"steps": 1})
    Worker(lease_seconds=30).run_until_idle()
    step = Step.objects.get(run=run)

    with pytest.raises(IntegrityError):
        Step.objects.create(
            run=run,
            seq=step.seq,
            kind=step.kind,
            effect=step.effect,
            request={},
            request_hash="x",
            idempotency_key="x",
            started_at=step.started_at,
        )


def test_it_uses_a_stable_idempotency_key_per_run_and_step() -> None:
    assert journal.idempotency_key(7, 3) == journal.idempotency_key(7, 3)
    assert journal.idempotency_key(7, 3) != journal.idempotency_key(3, 7)


def test_it_refuses_a_run_of_an_unknown_program() -> None:
    with pytest.raises(KernelError, match="No program named 'nope'"):
        start("nope", account=make_mission())


def test_its_hot_path_statements_are_prepared_on_the_server() -> None:
    """Django turns psycopg's prepared statements off; the journal must turn them on for its own
    statements (parse and plan cost more than the commit of a small step), and only for those."""
    fence = claim(start("chaos.noop"))
    for seq in (1, 2):
        journal.record_intent(fence, seq=seq, kind="tool_call", effect="read", name="x", request={})
        journal.record_result(fence, seq=seq, result={}, cost=Cost())
    for _ in range(6):  # a journal query that does not ask, run past psycopg's default (5)
        with pytest.raises(KernelError, match="has no intent"):
            journal.record_result(fence, seq=99, result={}, cost=Cost())

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]

    assert any("INSERT INTO kernel_step" in statement for statement in prepared), prepared
    assert any("UPDATE kernel_step SET result" in statement for statement in prepared), prepared
    assert not any("SELECT fence FROM kernel_run" in s for s in prepared), prepared  # unasked


def test_it_says_how_a_value_comes_back_from_the_journal() -> None:
    """Keys come back in jsonb's order, not in the order written: `as_stored` predicts it."""
    value = {"type": "tool_use", "input": {"zeta": 1, "b": [{"yy": 1, "x": 2}]}, "id": "t", "é": 0}
    fence = claim(start("chaos.noop"))
    journal.record_intent(fence, seq=1, kind="tool_call", effect="read", name="x", request={})
    journal.record_result(fence, seq=1, result=value, cost=Cost())

    back = journal.load(fence.run_id)[1].result

    assert back == value
    assert json.dumps(back) == json.dumps(journal.as_stored(value))
    assert json.dumps(back) != json.dumps(value)  # the order written is indeed not kept


class _SkewedClock:
    """The worker's wall clock a day behind the database's."""

    @staticmethod
    def now() -> datetime:
        return timezone.now() - timedelta(days=1)


def test_a_held_result_is_stamped_by_the_databases_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "timezone", _SkewedClock)
    run = start("test.counting")
    Worker(lease_seconds=30).run_until_idle()

    steps = list(Step.objects.filter(run=run).order_by("seq"))
    # Each read's result rode on the next intent; its finish falls between its own start and
    # the next step's, all three stamps from one clock.
    for step, after in itertools.pairwise(steps):
        assert step.finished_at is not None
        assert step.started_at <= step.finished_at <= after.started_at


def test_an_intents_stored_request_and_hash_are_those_of_the_request() -> None:
    request = {"b": [1, 2.5, None], "a": {"z": "é/x", "y": True}}
    run = start("chaos.noop", {"steps": 0})
    fence = claim(run)

    journal.record_intent(fence, seq=1, kind="tool_call", effect="read", name="n", request=request)

    step = Step.objects.get(run=run, seq=1)
    assert step.request == request
    assert step.request_hash == journal.request_hash("tool_call", "n", request)
    with pytest.raises(TypeError, match="not JSON serializable"):
        journal.record_intent(
            fence, seq=2, kind="tool_call", effect="read", name="n", request={"at": object()}
        )
    assert not Step.objects.filter(run=run, seq=2).exists()


def each_effect(ctx: RunContext) -> Outcome:
    for effect in (Effect.READ, Effect.MODEL_CALL, Effect.IDEMPOTENT_WRITE, Effect.NON_IDEMPOTENT):
        ctx.step(
            StepKind.TOOL_CALL, effect=effect, name=effect, request={}, execute=lambda c: Done(1)
        )
    return Outcome(output="done")


PROGRAMS.add("test.each_effect", each_effect)


def test_only_a_write_waits_for_its_intents_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read's or a model call's intent may be lost with its database's crash (both run
    again); a write's may not: its replay puts the write's checkpoint back only if it is there."""
    intents: list[bool] = []
    send = statements.send

    def sent(pgconn: Any, statement: statements.Statement, *args: Any, **kwargs: Any) -> Any:
        if b"INSERT INTO kernel_step" in statement.text:
            intents.append(b"'synchronous_commit', 'off'" not in statement.text)
        return send(pgconn, statement, *args, **kwargs)

    monkeypatch.setattr(statements, "send", sent)
    run = start("test.each_effect")

    assert Worker(lease_seconds=30).run_until_idle() == ["done"]
    assert intents == [False, False, True, True]
    assert Step.objects.filter(run=run, finished_at__isnull=False).count() == 4
