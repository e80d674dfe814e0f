"""Engine versions: a run recorded by an earlier engine resumes on a compatible program, or is
parked as "needs migration" for the owner; a worker of an earlier version keeps off later runs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kernel import programs, runs, versions
from kernel.context import Done, RunContext
from kernel.exceptions import KernelError
from kernel.models import Effect, Event, Run, RunStatus, Step, StepKind, Wait
from kernel.programs import Outcome
from kernel.worker import Worker
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db(transaction=True)


def asks_between(ctx: RunContext) -> Outcome:
    """A step, an owner answer to wait for (the run is in flight, off any worker), a step."""
    first = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name="look",
        request={},
        execute=lambda call: Done("looked"),
    )
    answer = ctx.wait_human({"question": "go on?"}, expires_in=timedelta(days=1))
    second = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name="finish",
        request={},
        execute=lambda call: Done("finished"),
    )
    return Outcome(output=[first, answer, second])


programs.PROGRAMS.add("test.versions.resumable", asks_between)
programs.COMPATIBLE.add("test.versions.resumable", frozenset({"1"}))
programs.PROGRAMS.add("test.versions.strict", asks_between)


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


def in_flight(program: str) -> Run:
    """A run of `program` started on engine 1, waiting for the owner after its first step."""
    run = start(program)
    assert run.engine_version == "1"
    assert work() == ["waiting"]
    return run


def answer(run: Run) -> None:
    runs.answer_wait(Wait.objects.get(run=run, state="open").pk, answer={"go": True})


def test_it_resumes_a_run_of_an_earlier_version_its_program_declares_compatible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = in_flight("test.versions.resumable")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    answer(run)

    assert work() == ["done"]

    run.refresh_from_db()
    assert run.output == ["looked", {"answer": {"go": True}}, "finished"]
    # From now on this engine writes its journal: an engine-1 worker must not take it back.
    assert run.engine_version == "2"
    assert run.needs_migration is False
    upgraded = Event.objects.get(run_id=run.pk, kind="run.engine_upgraded")
    assert upgraded.data["recorded_version"] == "1"


def test_it_parks_a_run_no_program_resumes_within_one_claim_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = in_flight("test.versions.strict")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    answer(run)

    assert work() == []  # one claim cycle: nothing to execute, the run is parked

    run.refresh_from_db()
    assert run.needs_migration is True
    assert run.engine_version == "1"
    assert not run.is_terminal
    parked = Event.objects.filter(run_id=run.pk, kind="run.needs_migration")
    assert [event.data["recorded_version"] for event in parked] == ["1"]
    assert work() == []  # parked once: no event at every cycle
    assert Event.objects.filter(run_id=run.pk, kind="run.needs_migration").count() == 1


def test_it_parks_a_run_whose_worker_died_mid_execution_as_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernel import scheduler

    run = start("test.versions.strict")
    assert scheduler.claim_next_run(worker="dead", lease_seconds=30) is not None
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)  # the lease ran out
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")

    assert work() == []

    run.refresh_from_db()
    assert (run.needs_migration, run.status, run.lease_owner) == (True, "waiting", "")


def test_it_resumes_a_parked_run_once_a_later_deployment_declares_it_compatible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = in_flight("test.versions.strict")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    answer(run)
    assert work() == []
    with programs.COMPATIBLE.registered("test.versions.strict", frozenset({"1"})):
        assert work() == ["done"]

    run.refresh_from_db()
    assert (run.needs_migration, run.engine_version) == (False, "2")


def test_it_leaves_a_run_of_a_later_version_to_its_own_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    run = in_flight_at_2 = start("test.versions.resumable")
    assert in_flight_at_2.engine_version == "2"
    monkeypatch.setattr(programs, "ENGINE_VERSION", "1")  # an old worker still running

    assert work() == []

    run.refresh_from_db()
    assert (run.status, run.needs_migration, run.engine_version) == ("queued", False, "2")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    assert work() == ["waiting"]


def test_it_restarts_a_parked_run_from_its_last_recorded_step_on_the_new_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = in_flight("test.versions.strict")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    answer(run)
    assert work() == []

    fresh = versions.restart(run.pk)

    assert fresh.engine_version == "2"
    assert fresh.contract["forked_from"] == {"run": run.pk, "seq": 1}
    assert sorted(work()) == ["cancelled", "waiting"]  # the parked run ends; the new one asks
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert Step.objects.get(run=fresh, seq=1).result == "looked"  # recorded, not redone
    answer(fresh)
    assert work() == ["done"]
    fresh.refresh_from_db()
    assert fresh.output == ["looked", {"answer": {"go": True}}, "finished"]
    assert Event.objects.filter(run_id=run.pk, kind="run.restarted").exists()


def test_it_restarts_a_parked_run_without_any_step_as_a_fresh_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = start("test.versions.strict")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    assert work() == []

    fresh = versions.restart(run.pk)

    assert (fresh.program, fresh.engine_version) == (run.program, "2")
    assert fresh.contract["restarted_from"] == {"run": run.pk}


def test_it_refuses_to_restart_a_run_that_is_not_parked() -> None:
    run = in_flight("test.versions.strict")

    with pytest.raises(KernelError) as refused:
        versions.restart(run.pk)

    assert refused.value.code == "not_parked"


def test_it_stops_a_parked_run_through_the_ordinary_stop_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = in_flight("test.versions.strict")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    answer(run)
    assert work() == []

    runs.request_stop(run.pk)

    assert work() == ["cancelled"]  # claimed only to end it: no program code ran
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.steps.count() == 2


def test_it_forks_a_parked_run_from_a_recorded_step_onto_the_new_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = in_flight("test.versions.strict")
    monkeypatch.setattr(programs, "ENGINE_VERSION", "2")
    answer(run)
    assert work() == []

    fork = runs.fork_run(run.pk, at_seq=1)

    assert fork.engine_version == "2"
    assert work() == ["waiting"]
    run.refresh_from_db()
    assert run.needs_migration is True  # the source stays parked until stopped


def test_it_finds_the_last_step_of_the_unbroken_recorded_prefix() -> None:
    run = in_flight("test.versions.strict")  # step 1 recorded, step 2 (the wait) open

    assert versions.last_recorded_seq(run.pk) == 1
    assert versions.rank("") == 0
    assert versions.rank("12") == 12
    assert versions.rank("2b") is None
