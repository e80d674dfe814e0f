"""A mission's wall-time cap: its root run's duration cap, from the run's start, which stops it
even while it waits on the owner (an approval left unanswered overnight)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from approvals.models import Approval, Status
from kernel.models import Run, RunStatus
from kernel.worker import Worker
from missions.launch import create_mission
from missions.models import Project

pytestmark = pytest.mark.django_db

# The model sends a task to another agent: a network tool, which asks the owner first.
ASKS_APPROVAL = {
    "turns": [
        {
            "text": "Asking the other agent.",
            "tool_calls": [
                {"name": "a2a_call", "arguments": {"url": "http://127.0.0.1:9", "text": "hi"}}
            ],
        },
        {"text": "Done."},
    ]
}


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


def waiting_mission(max_seconds: int | None) -> Run:
    caps = {"max_seconds": max_seconds}  # null: no cap, the owner's default aside
    mission, run = create_mission(
        project=Project.objects.create(name="p"),
        goal="Ask the other agent.",
        routes={"executor": {"provider": "scripted", "model": "scripted"}},
        caps=caps,
        trigger="api",
        script=ASKS_APPROVAL,
    )
    assert mission.max_seconds == max_seconds
    assert run.max_seconds == max_seconds
    assert work() == ["waiting"]
    assert Approval.objects.get(run=run).status == Status.PENDING
    return run


def test_a_run_waiting_on_an_approval_ends_when_its_wall_time_is_up() -> None:
    run = waiting_mission(3600)

    with time_machine.travel(timezone.now() + timedelta(minutes=47)):
        assert work() == []  # still within its time: nobody claims it
    with time_machine.travel(timezone.now() + timedelta(minutes=49)):
        assert work() == ["waiting"]  # past 80 %: claimed to tell the owner, waiting on
        assert work() == []
    with time_machine.travel(timezone.now() + timedelta(minutes=61)):
        assert work() == ["budget_exhausted"]

    ended = Run.objects.get(pk=run.pk)
    assert ended.status == RunStatus.BUDGET_EXHAUSTED
    assert ended.error == "max_seconds 3600 reached"
    # Nobody is left asked to approve for a run that has ended.
    assert Approval.objects.get(run=run).status == Status.CLOSED


def test_without_a_wall_time_cap_the_run_waits_on() -> None:
    run = waiting_mission(None)

    with time_machine.travel(timezone.now() + timedelta(days=2)):
        assert work() == []

    assert Run.objects.get(pk=run.pk).status == RunStatus.WAITING
