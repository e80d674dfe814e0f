"""The Costs screen per profile and week: missions started with a profile, how many completed,
and what one completed task cost (every mission of the week's spend, failed ones included); and
the evaluation tasks' outcomes, judged by their oracle."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from agentos.core import audit
from kernel import runs
from missions import pricing, profile_costs, profiles
from missions.evals import outcomes
from missions.evals.runner import Result
from missions.evals.suite import load
from missions.launch import create_mission
from missions.models import Mission, Profile
from tests.console.factories import price_scripted, project, work

pytestmark = pytest.mark.usefixtures("seeded_catalog", "seeded_profiles")

USAGE = {"input_tokens": 1000, "output_tokens": 0}  # 3,000 µ$ at the scripted model's price


@pytest.fixture
def priced() -> Iterator[None]:
    """The scripted model priced (by the test); the cached price goes with its rolled-back row."""
    yield
    pricing._price_in_force.cache_clear()


def started(profile: str | None, turns: list[dict[str, Any]]) -> Mission:
    mission, _run = create_mission(
        project=project(),
        goal="Tidy the tracker",
        trigger="console",
        routes={"executor": {"provider": "scripted", "model": "scripted"}},
        script={"turns": turns},
        profile=profile,
    )
    return mission


def test_it_shows_completion_and_cost_per_completed_task_per_profile_and_week(
    owner_client: Client, priced: None
) -> None:
    profiles.save("ops", {}, actor=audit.Actor(), create=True)  # no criteria: done is done
    done: list[dict[str, Any]] = [{"text": "Done.", "usage": USAGE}]
    with time_machine.travel(timezone.now() - timedelta(days=7)):
        price_scripted()  # from a week ago
        started("ops", done)
        assert work() == ["done"]
    started("ops", done)
    started("ops", done)
    runs.stop_account(started("ops", done).pk, by="test")  # never completed
    started(None, done)  # no profile: not counted per profile
    assert sorted(work()) == ["cancelled", "done", "done", "done"]

    report = profile_costs.report()

    monday = timezone.now().astimezone(UTC).date()
    monday -= timedelta(days=monday.weekday())
    assert [
        (r.profile, r.week, r.missions, r.completed, r.usd_micros) for r in report.missions
    ] == [
        ("ops", monday, 3, 2, 6_000),
        ("ops", monday - timedelta(days=7), 1, 1, 3_000),
    ]
    assert [(r.rate, r.per_completed_usd_micros) for r in report.missions] == [
        (2 / 3, 3_000),
        (1.0, 3_000),
    ]
    content = owner_client.get("/costs/").content.decode()
    assert 'id="costs-profiles"' in content
    assert f'data-profile="ops" data-week="{monday:%Y-%m-%d}"' in content
    assert "2 (67 %)" in content
    assert "No evaluation ran in these weeks." in content


def test_evaluation_tasks_count_by_their_oracle_not_their_mission(owner_client: Client) -> None:
    research = Profile.objects.get(name="research")
    tasks = load("default").tasks
    mission = started(None, [{"text": "Done."}])
    assert work() == ["done"]
    for task, passed, usd in ((tasks[0], True, 4_000), (tasks[1], False, 2_000)):
        result = Result(task, "done", passed, "", tokens=10, usd_micros=usd, seconds=1.0)
        outcomes.record(
            Result(**{**result.__dict__, "mission_id": mission.pk}),
            suite="research",
            mode="single",
            profile=research,
        )

    report = profile_costs.report()

    assert report.missions == []  # its mission is an evaluation's
    (row,) = report.evaluations
    assert (row.profile, row.missions, row.completed, row.usd_micros) == ("research", 2, 1, 6_000)
    assert row.per_completed_usd_micros == 6_000
    content = owner_client.get("/costs/").content.decode()
    assert 'data-profile="research"' in content
    assert "$0.006" in content
