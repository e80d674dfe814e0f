from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from kernel import heartbeats, tasks
from kernel.models import WorkerBeat

pytestmark = pytest.mark.django_db


def test_it_reports_unknown_before_any_worker_beats() -> None:
    assert heartbeats.pool_status().state == "unknown"


def test_it_counts_a_worker_that_just_started() -> None:
    heartbeats.record_beat(started=True)

    status = heartbeats.pool_status()

    assert status.state == "up"
    assert status.live_workers == 1


def test_it_keeps_one_row_per_worker_and_counts_beats() -> None:
    heartbeats.record_beat(worker="host:1", started=True)
    heartbeats.record_beat(worker="host:1")
    heartbeats.record_beat(worker="host:2")

    assert WorkerBeat.objects.get(worker="host:1").beats == 2
    assert heartbeats.pool_status().live_workers == 2


def test_it_turns_stale_when_beats_stop_and_up_when_they_resume() -> None:
    heartbeats.record_beat(worker="host:1")
    later = timezone.now() + timedelta(minutes=5)

    with time_machine.travel(later, tick=False):
        assert heartbeats.pool_status().state == "stale"
        tasks.heartbeat.call_local()
        assert heartbeats.pool_status().state == "up"
        assert heartbeats.pool_status().live_workers == 1


def test_it_forgets_workers_silent_for_a_day() -> None:
    heartbeats.record_beat(worker="host:old")

    with time_machine.travel(timezone.now() + timedelta(days=2)):
        tasks.heartbeat.call_local()

    assert list(WorkerBeat.objects.values_list("worker", flat=True)) == [heartbeats.worker_name()]
