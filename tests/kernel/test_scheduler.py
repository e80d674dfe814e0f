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
