"""Health counts the workers that are alive now: each process beats on its own, and one that
stopped beating or whose process is gone no longer counts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from pytest_django.fixtures import Settings

from agentos import health
from kernel import heartbeats, holders
from kernel.models import WorkerBeat

pytestmark = pytest.mark.django_db


def local_name(pid: int) -> str:
    """The heartbeat name of a process of this machine (whose death can be proven)."""
    here = holders.this_process()
    assert here is not None, "these tests need Linux's /proc"
    stat = (holders.PROC / str(pid) / "stat").read_text()
    start = int(stat[stat.rfind(")") + 2 :].split()[19])
    return holders.Holder(here.host, pid, start, here.space).name


def exited_process_name() -> str:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        name = local_name(child.pid)
    finally:
        child.kill()
        child.wait()
    return name


def test_it_counts_each_configured_worker_that_beats(settings: Settings) -> None:
    settings.HUEY_WORKERS = 2
    heartbeats.record_beat(worker="node:1", started=True)
    heartbeats.record_beat(worker="node:2", started=True)

    workers = health.check().workers

    assert workers.state == "up"
    assert workers.detail == "2 of 2 workers live"


def test_it_does_not_count_a_worker_whose_beat_is_older_than_its_interval_times_n(
    settings: Settings,
) -> None:
    settings.HUEY_WORKERS = 2
    settings.WORKER_BEAT_SECONDS = 10
    heartbeats.record_beat(worker="node:1", started=True)
    with time_machine.travel(timezone.now() + timedelta(seconds=25), tick=False):
        heartbeats.record_beat(worker="node:2", started=True)
        assert heartbeats.pool_status().live_workers == 2
    with time_machine.travel(timezone.now() + timedelta(seconds=10 * heartbeats.MISSED_BEATS + 1)):
        assert heartbeats.pool_status().live_workers == 1
        assert health.check().workers.detail == "1 of 2 workers live"


def test_it_does_not_count_a_worker_whose_process_is_gone(settings: Settings) -> None:
    settings.HUEY_WORKERS = 2
    heartbeats.record_beat(worker=local_name(os.getpid()), started=True)
    heartbeats.record_beat(worker=exited_process_name(), started=True)

    assert heartbeats.pool_status().live_workers == 1


def test_a_restarted_pool_shows_its_new_workers_only(settings: Settings) -> None:
    # The processes of before the restart beat a moment ago, then exited: they are gone.
    settings.HUEY_WORKERS = 2
    for _ in range(2):
        heartbeats.record_beat(worker=exited_process_name(), started=True)
    heartbeats.record_beat(worker=local_name(os.getpid()), started=True)
    heartbeats.record_beat(worker="other-host:7", started=True)

    assert health.check().workers.detail == "2 of 2 workers live"


class StopAfter(threading.Event):
    """A stop signal that comes after `waits` beat intervals."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.waits = waits
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return len(self.timeouts) > self.waits


def test_every_worker_process_beats_on_its_own_until_stopped(settings: Settings) -> None:
    settings.WORKER_BEAT_SECONDS = 7
    stopping = StopAfter(3)

    heartbeats.beat_until(stopping, worker="node:1")

    assert WorkerBeat.objects.get(worker="node:1").beats == 3
    assert stopping.timeouts == [7, 7, 7, 7]


def test_a_worker_that_stops_is_forgotten_at_once() -> None:
    heartbeats.record_beat(worker="node:1", started=True)
    heartbeats.record_beat(worker="node:2", started=True)

    heartbeats.forget(worker="node:1")

    assert list(WorkerBeat.objects.values_list("worker", flat=True)) == ["node:2"]
    assert heartbeats.pool_status().live_workers == 1


def test_the_beat_names_this_process_so_its_death_can_be_proven() -> None:
    here = holders.this_process()

    assert here is not None
    assert heartbeats.worker_name() == here.name
