"""The kill switch: one confirmed tap stops every run (even one stuck in a step that ignores the
stop), takes every lease back, closes what waits for the owner, pauses every schedule, says what
it stopped, and is in the security log."""

from __future__ import annotations

from concurrent import futures

import pytest
from django.test import Client

from agentos.core.models import AuditEvent
from approvals.models import Approval
from kernel.models import Run, RunStatus, Step, WaitState
from kernel.worker import Worker
from missions.models import Project, Schedule
from tests.approvals.factories import make_approval
from tests.kernel.factories import start
from tests.polling import wait_for
from tests.processes import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_for_approval() -> Approval:
    """An approval whose run waits for it, as a suspended run does (no worker would claim it)."""
    approval = make_approval()
    Run.objects.filter(pk=approval.run_id).update(status=RunStatus.WAITING, runnable_at=None)
    return approval


def test_it_asks_before_stopping_anything(owner_client: Client) -> None:
    queued = start("chaos.noop", {"steps": 1})

    page = owner_client.get("/stop-everything/").content.decode()
    refused = owner_client.post("/stop-everything/", {})

    assert "1 run is unfinished" in page
    assert refused.status_code == 400
    assert "Nothing was stopped" in refused.content.decode()
    assert not Run.objects.get(pk=queued.pk).cancel_requested
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.KILL_SWITCH).exists()


def test_it_stops_every_run_takes_the_leases_back_and_pauses_the_schedules(
    owner_client: Client,
) -> None:
    approval = waiting_for_approval()
    with worker_thread(max_runs=3) as loop:
        stop_everything_while_a_step_is_stuck(owner_client, approval, loop)


def stop_everything_while_a_step_is_stuck(
    owner_client: Client, approval: Approval, loop: Worker
) -> None:
    stuck = start("chaos.busy", {"seconds": 3})  # a step that ignores stop requests
    wait_for(
        lambda: (
            Step.objects.filter(run=stuck, finished_at=None).exists()
            and Run.objects.get(pk=stuck.pk).lease_expires_at is not None
        ),
        timeout=30,
        message="the stuck step to start",
    )
    stuck_execution = loop.active[stuck.pk]
    schedule = Schedule.objects.create(
        name="digest",
        mission={"project_id": Project.objects.create(name="nightly").pk, "goal": "Digest."},
        cron="0 7 * * *",
    )

    response = owner_client.post("/stop-everything/", {"confirm": "yes"})

    content = response.content.decode()
    assert response.status_code == 200
    assert "Stopped 2 runs." in content
    assert "Took back 1 lease" in content
    assert "Paused 1 schedule." in content
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    assert Approval.objects.get(pk=approval.pk).state != WaitState.OPEN
    # The stuck step's worker can write nothing more; another claim ends the run cancelled.
    wait_for(
        lambda: Run.objects.get(pk=stuck.pk).is_terminal,
        timeout=30,
        message="the stuck run to end",
    )
    assert Run.objects.get(pk=stuck.pk).status == RunStatus.CANCELLED
    # The stuck step wakes up and tries to record its result: wait for that execution to end.
    assert futures.wait([stuck_execution], timeout=30).done, "the stuck step never woke up"
    assert not Step.objects.filter(run=stuck).exclude(finished_at=None).exists()
    wait_for(
        lambda: Run.objects.get(pk=approval.run_id).is_terminal,
        timeout=30,
        message="the approval's run to end",
    )
    event = AuditEvent.objects.filter(kind=AuditEvent.Kind.KILL_SWITCH).earliest("pk")
    assert sorted(event.detail["runs"]) == sorted([stuck.pk, approval.run_id])
    assert event.detail["schedules"] == [schedule.pk]


def test_settings_leads_to_it(owner_client: Client) -> None:
    assert 'href="/stop-everything/"' in owner_client.get("/settings/").content.decode()
