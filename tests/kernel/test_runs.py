"""Waits, children, cancellation and budgets, driven through a real in-process worker."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from kernel import execution, runs
from kernel.budgets import Cost
from kernel.context import Done, RunContext, StepCall
from kernel.exceptions import KernelError
from kernel.models import Effect, Event, GlobalBudget, Run, Step, StepKind, Wait, WaitState
from kernel.programs import PROGRAMS, Outcome
from kernel.worker import Worker
from tests.kernel.factories import make_mission, start
from tests.kernel.test_journal import counting  # also registers the "test.counting" program
from tests.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def asker(ctx: RunContext) -> Outcome:
    answer = ctx.wait_human({"question": "ship it?"}, expires_in=timedelta(days=3))
    return Outcome(output=answer)


def napper(ctx: RunContext) -> Outcome:
    ctx.sleep(timedelta(hours=2))
    return Outcome(output="rested")


def spender(ctx: RunContext) -> Outcome:
    """Model calls costing 100 tokens and 1,000 µ$ each, `calls` times, spawning if asked."""
    children = [
        ctx.spawn("test.spender", {"calls": ctx.input.get("child_calls", 0)})
        for _ in range(ctx.input.get("children", 0))
    ]
    if children:
        ctx.join(children)
    for index in range(ctx.input.get("calls", 0)):
        ctx.step(
            StepKind.MODEL_CALL,
            effect=Effect.MODEL_CALL,
            name="m",
            request={"i": index},
            execute=lambda call: Done(
                {"ok": True}, Cost(input_tokens=60, output_tokens=40, usd_micros=1000)
            ),
        )
    return Outcome(output="spent")


def spawner(ctx: RunContext) -> Outcome:
    child = ctx.spawn(ctx.input["program"], ctx.input.get("child_input", {}))
    return Outcome(output=ctx.join([child]))


def stuck(ctx: RunContext) -> Outcome:
    def wait_for_stop(call: StepCall) -> Done:
        interrupted = call.stopping.wait(30)
        return Done({"interrupted": interrupted})

    ctx.step(StepKind.TOOL_CALL, effect=Effect.READ, name="long", request={}, execute=wait_for_stop)
    return Outcome(output="finished anyway")


for program in (asker, napper, spender, spawner, stuck):
    PROGRAMS.add(f"test.{program.__name__}", program)


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


# --- durable waits ------------------------------------------------------------------------------


def test_it_waits_for_the_owner_as_a_row_and_resumes_days_later() -> None:
    run = start("test.asker")
    assert work() == ["waiting"]
    wait = Wait.objects.get(run=run)
    assert Run.objects.get(pk=run.pk).lease_expires_at is None  # no process holds it

    with time_machine.travel(timezone.now() + timedelta(days=2)):
        assert work() == []  # nothing to do while nobody answered
        runs.answer_wait(wait.pk, answer={"yes": True})
        assert work() == ["done"]

    assert Run.objects.get(pk=run.pk).output == {"answer": {"yes": True}}


def test_it_treats_an_expired_owner_wait_as_refusal() -> None:
    run = start("test.asker")
    work()

    with time_machine.travel(timezone.now() + timedelta(days=3, seconds=1)):
        assert work() == ["done"]  # woken by its own expiry

    assert Run.objects.get(pk=run.pk).output == {"refused": True, "reason": "expired"}
    assert Wait.objects.get(run=run).state == "expired"


def test_an_answer_by_one_of_the_owner_s_tokens_is_the_owner_s() -> None:
    for by, trust in (("token:phone", "owner"), ("owner", "owner"), ("scheduler", "system")):
        run = start("test.asker")
        work()
        runs.answer_wait(Wait.objects.get(run=run).pk, answer="yes", by=by)
        answered = Event.objects.filter(run=run).order_by("-pk").first()
        assert answered is not None
        assert answered.trust == trust, by


def test_it_refuses_to_answer_a_wait_twice_or_after_expiry() -> None:
    run = start("test.asker")
    work()
    wait = Wait.objects.get(run=run)
    runs.answer_wait(wait.pk, answer="yes")

    with pytest.raises(KernelError, match="already answered"):
        runs.answer_wait(wait.pk, answer="no")
    assert Wait.objects.get(pk=wait.pk).answer == "yes"

    other = start("test.asker")
    work()
    late = Wait.objects.get(run=other)
    with (
        time_machine.travel(timezone.now() + timedelta(days=4)),
        pytest.raises(KernelError, match="expired"),
    ):
        runs.answer_wait(late.pk, answer="yes")


def test_it_fires_a_timer_only_when_due() -> None:
    run = start("test.napper")
    assert work() == ["waiting"]

    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        assert work() == []
    with time_machine.travel(timezone.now() + timedelta(hours=2, seconds=1)):
        assert work() == ["done"]
    assert Run.objects.get(pk=run.pk).output == "rested"


def test_it_joins_children_and_wakes_the_parent_when_they_end() -> None:
    parent = start("test.spawner", {"program": "test.asker"})
    assert sorted(work()) == ["waiting", "waiting"]  # the parent joins, the child asks
    child = Run.objects.get(parent=parent)
    assert (child.depth, child.root_id, child.ancestors) == (1, parent.pk, [parent.pk])

    runs.answer_wait(Wait.objects.get(run=child).pk, answer="ok")

    assert work() == ["done", "done"]
    assert Run.objects.get(pk=parent.pk).output == {
        str(child.pk): {"status": "done", "output": {"answer": "ok"}}
    }


def test_it_limits_the_run_tree_to_depth_3() -> None:
    mission = make_mission()
    run = runs.start_run(account=mission, program="chaos.noop")
    for _ in range(3):
        run = runs.start_run(account=mission, program="chaos.noop", parent=run)
    assert run.depth == 3

    with pytest.raises(KernelError, match="depth is limited to 3"):
        runs.start_run(account=mission, program="chaos.noop", parent=run)


# --- cancellation -------------------------------------------------------------------------------


def test_it_cancels_a_whole_subtree_and_never_ends_it_done() -> None:
    parent = start("test.spawner", {"program": "test.napper"})
    work()
    child = Run.objects.get(parent=parent)

    assert runs.request_stop(parent.pk) == 2

    assert sorted(work()) == ["cancelled", "cancelled"]
    assert set(Run.objects.values_list("status", flat=True)) == {"cancelled"}
    assert Event.objects.filter(kind="run.stop_requested", run_id=parent.pk).exists()
    assert Run.objects.get(pk=child.pk).finished_at is not None


def test_it_interrupts_the_executing_step() -> None:
    run = start("test.stuck")
    # The stop arrives while the step runs: the lease keeper relays it within a renewal.
    worker = Worker(lease_seconds=0.3)
    claim = worker.claim_one()
    assert claim is not None
    with ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(execution.execute, claim)
        wait_for(
            lambda: Step.objects.filter(run=run).exists(),
            timeout=10,
            message="the step to start",
            interval=0.01,
        )
        runs.request_stop(run.pk)

        assert outcome.result(timeout=10) == "cancelled"
    assert Step.objects.get(run=run).result == {"interrupted": True}


# --- budgets ------------------------------------------------------------------------------------


def test_it_stops_a_run_at_its_cap_before_the_next_step() -> None:
    run = start("test.spender", {"calls": 10}, caps={"max_usd_micros": 3000})

    assert work() == ["budget_exhausted"]

    run.refresh_from_db()
    assert run.steps.count() == 3  # the 3rd call reached the cap; no 4th step started
    assert (run.usd_micros, run.turns, run.input_tokens, run.output_tokens) == (3000, 3, 180, 120)


def test_it_debits_a_childs_spend_up_the_tree_and_to_the_mission() -> None:
    parent = start("test.spender", {"children": 2, "child_calls": 2, "calls": 1})

    work()

    parent.refresh_from_db()
    assert parent.status == "done"
    assert parent.usd_micros == 5000  # 2 children of 2 calls each + 1 own call
    assert parent.turns == 5
    for child in parent.children.all():
        assert child.usd_micros == 2000
    assert parent.account.spent()["usd_micros"] == 5000


def test_it_stops_the_whole_subtree_when_an_ancestor_reaches_its_cap() -> None:
    parent = start("test.spender", {"children": 2, "child_calls": 5}, caps={"max_usd_micros": 3000})

    work()

    statuses = set(Run.objects.values_list("status", flat=True))
    assert statuses == {"budget_exhausted"}
    assert Run.objects.get(pk=parent.pk).usd_micros <= 4000


def test_it_stops_runs_over_the_mission_cap() -> None:
    mission = make_mission(max_tokens=250)
    run = start("test.spender", {"calls": 5}, account=mission)

    work()

    run.refresh_from_db()
    assert run.status == "budget_exhausted"
    assert run.steps.count() == 3


def test_it_stops_runs_over_the_global_daily_cap() -> None:
    GlobalBudget.objects.create(daily_usd_micros=2000)
    run = start("test.spender", {"calls": 5})

    work()

    assert Run.objects.get(pk=run.pk).status == "budget_exhausted"
    assert Run.objects.get(pk=run.pk).steps.count() == 2


def test_it_stops_a_run_past_its_wall_clock_cap() -> None:
    run = start("test.napper", caps={"max_seconds": 60})
    work()

    with time_machine.travel(timezone.now() + timedelta(hours=3)):
        assert work() == ["budget_exhausted"]
    assert Run.objects.get(pk=run.pk).error == "max_seconds 60 reached"


def test_a_root_past_its_wall_time_takes_its_sub_agents_with_it() -> None:
    parent = start("test.spawner", {"program": "test.asker"}, caps={"max_seconds": 60})
    assert sorted(work()) == ["waiting", "waiting"]  # the parent joins, the child asks
    child = Run.objects.get(parent=parent)

    with time_machine.travel(timezone.now() + timedelta(minutes=2)):
        assert sorted(work()) == ["budget_exhausted", "budget_exhausted"]

    parent.refresh_from_db()
    child.refresh_from_db()
    assert (parent.error, child.status) == ("max_seconds 60 reached", "budget_exhausted")
    assert not Wait.objects.filter(run=child, state=WaitState.OPEN).exists()


@pytest.mark.parametrize(
    ("caps", "message"),
    [
        ({"max_usd_micros": -1}, "cannot be negative"),
        ({"max_turns": "ten"}, "must be an integer"),
        ({"max_fun": 3}, "Unknown budget cap"),
    ],
)
def test_it_refuses_bad_caps(caps: dict[str, object], message: str) -> None:
    with pytest.raises(KernelError, match=message):
        start("chaos.noop", caps=caps)
    assert not Run.objects.exists()


def test_it_refuses_a_run_that_is_its_own_parent() -> None:
    from django.db import IntegrityError

    run = start("chaos.noop")
    with pytest.raises(IntegrityError):
        Run.objects.filter(pk=run.pk).update(parent_id=run.pk)


def test_it_leaves_runs_of_a_later_engine_version_to_their_own_workers() -> None:
    run = start("chaos.noop")
    Run.objects.filter(pk=run.pk).update(engine_version="99")

    assert work() == []

    Run.objects.filter(pk=run.pk).update(engine_version=run.engine_version)
    assert work() == ["done"]


def test_it_refuses_a_child_in_another_account() -> None:
    parent = start("chaos.noop")

    with pytest.raises(KernelError, match="belongs to its parent's account"):
        runs.start_run(account=make_mission(), program="chaos.noop", parent=parent)


def test_it_stops_every_run_of_a_mission_that_reached_its_cap() -> None:
    mission = make_mission(max_usd_micros=2000)
    patient = start("test.asker", account=mission)
    work()
    start("test.spender", {"calls": 5}, account=mission)

    work()

    assert Run.objects.get(pk=patient.pk).status == "budget_exhausted"
    assert set(Run.objects.values_list("status", flat=True)) == {"budget_exhausted"}


def patient(ctx: RunContext) -> Outcome:
    """A long step the owner may interrupt, then a second step: the run must go on."""

    def wait_for_interrupt(call: StepCall) -> Done:
        return Done({"interrupted": call.stopping.wait(30)})

    first = ctx.step(
        StepKind.TOOL_CALL, effect=Effect.READ, name="long", request={}, execute=wait_for_interrupt
    )
    second = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name="next",
        request={},
        execute=lambda call: Done({"stopping": call.stopping.is_set()}),
    )
    return Outcome(output=[first, second])


PROGRAMS.add("test.patient", patient)


def test_it_interrupts_the_running_step_and_goes_on() -> None:
    run = start("test.patient")
    worker = Worker(lease_seconds=0.3)
    claim = worker.claim_one()
    assert claim is not None
    with ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(execution.execute, claim)
        wait_for(
            lambda: Step.objects.filter(run=run).exists(),
            timeout=10,
            message="the step to start",
            interval=0.01,
        )
        runs.request_interrupt(run.pk)

        assert outcome.result(timeout=10) == "done"
    run.refresh_from_db()
    assert run.output == [{"interrupted": True}, {"stopping": False}]
    assert run.interrupt_requested is False


def test_it_stops_at_its_tool_call_cap_even_for_free_steps_and_bills_them() -> None:
    run = start("test.counting", caps={"max_tool_calls": 2})

    assert work() == ["budget_exhausted"]

    run.refresh_from_db()
    assert run.steps.count() == 2
    assert run.tool_calls == 2  # the free steps' counters reached the ledger when it ended
    assert run.billed_through == 2


def test_it_counts_free_steps_once_across_a_crash_and_a_resume() -> None:
    from kernel import scheduler

    run = start("test.counting")
    claim = scheduler.claim_next_run(worker="a", lease_seconds=30)
    assert claim is not None
    context = RunContext(run=Run.objects.get(pk=run.pk), fence=claim.fence, records={})
    counting(context)  # three free tool steps... and the worker "dies" before billing them
    assert Run.objects.get(pk=run.pk).tool_calls == 0

    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)
    assert work() == ["done"]  # the resume replays them from the journal and bills them once

    assert Run.objects.get(pk=run.pk).tool_calls == 3


def payer(ctx: RunContext) -> Outcome:
    """A non-idempotent step without a probe; it dies mid-effect as many times as asked."""

    def pay(call: StepCall) -> Done:
        from kernel.models import ChaosEffect

        ChaosEffect.objects.create(
            key=call.idempotency_key,
            run_id_value=call.run_id,
            seq=call.seq,
            effect="non_idempotent",
        )
        if ChaosEffect.objects.filter(key=call.idempotency_key).count() <= ctx.input["deaths"]:
            raise SystemExit("the worker died after the effect, before its result")
        return Done({"paid": True})

    return Outcome(
        output=ctx.step(
            StepKind.TOOL_CALL, effect=Effect.NON_IDEMPOTENT, name="pay", request={}, execute=pay
        )
    )


PROGRAMS.add("test.payer", payer)


def test_it_asks_the_owner_again_after_a_second_interruption() -> None:
    from kernel.context import NOT_DONE
    from kernel.models import ChaosEffect, WaitState

    run = start("test.payer", {"deaths": 2})
    with pytest.raises(SystemExit):
        work()  # applied once, died before the result
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)
    assert work() == ["waiting"]  # an interrupted non-idempotent step: the owner is asked
    wait = Wait.objects.get(run=run)
    # The owner (wrongly, or before the effect was visible) says it did not happen.
    runs.answer_wait(wait.pk, answer={"verdict": NOT_DONE})
    with pytest.raises(SystemExit):
        work()  # applied a second time, died again
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)

    assert work() == ["waiting"]  # the old verdict is not reused: asked again

    assert Wait.objects.get(pk=wait.pk).state == WaitState.OPEN
    assert ChaosEffect.objects.filter(run_id_value=run.pk).count() == 2
