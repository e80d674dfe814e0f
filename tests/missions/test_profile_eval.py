"""`mission_eval` under a profile, offline: each mission starts with the profile (its tools, level
and caps, not its criteria: the task's oracle judges), each task's outcome is kept per profile,
and `--profiles` ends with the table per profile."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from kernel.models import Run
from missions.evals import outcomes
from missions.evals.runner import Result
from missions.evals.suite import load
from missions.models import EvalOutcome, Mission, Profile

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_profiles")]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key: the offline model plays the tasks' scripts."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def mission_eval(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("mission_eval", *args, "--any-database", stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.django_db(transaction=True)
def test_a_task_runs_offline_under_a_profile_and_its_outcome_is_kept() -> None:
    lines = mission_eval("default", "--profile", "research", "--tasks", "research-invoices")

    assert "profile research;" in lines[0]
    assert "completed 1/1 (100%)" in lines[-2], "\n".join(lines)
    research = Profile.objects.get(name="research")
    mission = Mission.objects.get()
    assert mission.profile == research
    assert mission.criteria == []  # the oracle judges an evaluation task, not an evaluator
    assert (mission.max_usd_micros, mission.max_seconds) == (
        research.max_usd_micros,
        research.max_seconds,
    )
    root = Run.objects.get(account=mission, parent__isnull=True)
    assert set(root.input["tools"]) <= {*research.tools, "load_skill"}
    outcome = EvalOutcome.objects.get()
    assert (outcome.profile, outcome.profile_name, outcome.suite, outcome.task) == (
        research,
        "research",
        "default",
        "research-invoices",
    )
    assert (outcome.passed, outcome.status, outcome.mission) == (True, "done", mission)
    assert outcome.tokens == mission.spent()["tokens"] > 0


def test_an_unknown_profile_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(CommandError, match=r"No profile 'ops'; profiles: analysis, automation,"):
        mission_eval("default", "--profile", "ops", "--tasks", "py-regex")
    assert not Mission.objects.exists()


@pytest.mark.parametrize(
    "args",
    [[], ["default", "--profiles"], ["--profiles", "--profile", "research"]],
)
def test_a_suite_or_every_profile_is_asked_not_both(args: list[str]) -> None:
    with pytest.raises(CommandError, match="Name a suite"):
        mission_eval(*args)


def test_every_profile_without_a_suite_is_listed_as_such() -> None:
    Profile.objects.all().delete()
    Profile.objects.create(name="ops")

    lines = mission_eval("--profiles")

    assert lines[-2:] == [outcomes.HEADER, f"{'ops':<14} no suite of its name"]
    assert not Mission.objects.exists()


def test_the_table_counts_cost_per_completed_task() -> None:
    tasks = load("default").tasks
    results = tuple(
        Result(tasks[i], "done", passed, "", tokens=1000, usd_micros=300_000, seconds=1.0)
        for i, passed in enumerate([True, True, False])
    )

    lines = outcomes.table(
        [outcomes.Line("research", "research", results), outcomes.Line("ops", "", skipped="none")]
    )

    assert lines[1].split() == ["research", "research", "3", "2/3", "67%", "0.450000", "1500"]
    assert lines[-1] == (
        "mission_eval profile=research suite=research tasks=3 completed=2 rate=0.667"
        " cost_per_completed=0.450000 tokens_per_completed=1500"
    )
