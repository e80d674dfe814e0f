"""Claims: skip-locked, capped per mission and globally, fenced."""

from __future__ import annotations

import pytest

from kernel import scheduler
from kernel.models import GlobalBudget, Run
from tests.kernel.factories import make_mission, start

pytestmark = pytest.mark.django_db(transaction=True)


def claim(limit: int) -> list[scheduler.Claim]:
    return scheduler.claim_runs(worker="test", lease_seconds=30, limit=limit)


def test_it_claims_the_oldest_runnable_runs_first_and_bumps_their_fences() -> None:
    mission = make_mission()
    first, second = start("chaos.noop", account=mission), start("chaos.noop", account=mission)

    claims = claim(1)

    assert [c.fence.run_id for c in claims] == [first.pk]
    assert claims[0].fence.token == 1
    assert Run.objects.get(pk=first.pk).lease_owner == "test"
    assert [c.fence.run_id for c in claim(5)] == [second.pk]
    assert claim(5) == []  # both are leased


def test_it_keeps_a_mission_under_its_concurrency_cap() -> None:
    mission = make_mission(max_concurrent_runs=2)
    for _ in range(3):
        start("chaos.noop", account=mission)
    other = start("chaos.noop")

    claimed = {c.fence.run_id for c in claim(10)}

    assert len(claimed) == 3
    assert other.pk in claimed
    assert claim(10) == []


def test_it_keeps_under_the_global_cap() -> None:
    GlobalBudget.objects.create(max_running_runs=2)
    for _ in range(3):
        start("chaos.noop")

    assert len(claim(10)) == 2
    assert claim(10) == []


def test_it_gives_a_run_back_at_once_on_release() -> None:
    run = start("chaos.noop")
    (held,) = claim(1)

    scheduler.release(held.fence)

    (again,) = claim(1)
    assert again.fence.run_id == run.pk
    assert again.fence.token == held.fence.token + 1


def test_a_claimer_frozen_inside_its_claim_does_not_stop_the_others() -> None:
    """Frozen (SIGSTOP, a stalled VM) while it holds the claim lock, a worker is disconnected
    once idle for its lease: its claim rolls back and another worker claims the run."""
    import threading
    import time

    from django.db import DatabaseError, connection

    from kernel import crashpoints

    run = start("chaos.noop")
    inside, outcome = threading.Event(), list[object]()

    def freeze(point: str, run_id: int, seq: int) -> None:
        if point == "claim_locked" and threading.current_thread().name == "frozen":
            inside.set()
            time.sleep(4)

    def frozen_claim() -> None:
        try:
            outcome.append(scheduler.claim_runs(worker="frozen", lease_seconds=1, limit=1))
        except DatabaseError as error:  # disconnected by the server
            outcome.append(error)
        finally:
            connection.close()

    with crashpoints.handling(freeze):
        frozen = threading.Thread(target=frozen_claim, name="frozen")
        frozen.start()
        assert inside.wait(timeout=10), "the frozen claimer never took the lock"
        began = time.monotonic()
        taken = claim(1)
        waited = time.monotonic() - began
        frozen.join(timeout=10)

    assert [c.fence.run_id for c in taken] == [run.pk]
    assert waited < 3.5  # the frozen one's 4 s were not waited out
    assert "idle-in-transaction timeout" in str(outcome[0])
    run.refresh_from_db()
    assert (run.lease_owner, run.fence) == ("test", taken[0].fence.token)
