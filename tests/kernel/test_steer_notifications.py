"""The owner's stop and interrupt reach the step under way at once, not at the next lease
renewal (a third of the 30 s lease): the database notifies the worker executing the run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection

from kernel import runs, scheduler
from kernel.models import Run, RunStatus, Step
from kernel.worker import Worker
from tests.kernel.factories import start
from tests.polling import wait_for
from tests.processes import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 30.0  # renewals every 10 s: what the notification must beat
SLOW_READ_SEQ = 2  # chaos.workflow's read that waits on `stopping`


@pytest.fixture
def worker() -> Iterator[Worker]:
    with worker_thread(lease_seconds=LEASE_SECONDS) as loop:
        yield loop


def slow_read_under_way() -> Run:
    run = start("chaos.workflow", {"n": 1, "read_seconds": 120})
    wait_for(
        lambda: Step.objects.filter(run=run, seq=SLOW_READ_SEQ, finished_at=None).exists(),
        timeout=20,
        message="the slow read to start",
    )
    # The notification must find the worker's doorbell listening (the next renewal is ~10 s away).
    wait_for(doorbell_listening, timeout=10, message="the worker's doorbell to listen")
    return run


def doorbell_listening() -> bool:
    """A connection of this test's database has sent LISTEN (its last statement: it waits)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f"LISTEN {scheduler.CHANNEL}"],
        )
        return cursor.fetchone() is not None


def test_a_stop_reaches_the_running_step_within_a_second(worker: Worker) -> None:
    run = slow_read_under_way()

    asked = time.monotonic()
    runs.request_stop(run.pk)
    wait_for(lambda: Run.objects.get(pk=run.pk).is_terminal, timeout=20, message="the run to end")

    assert time.monotonic() - asked < 1.5
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_an_interrupt_reaches_the_running_step_within_a_second(worker: Worker) -> None:
    run = slow_read_under_way()

    asked = time.monotonic()
    runs.request_interrupt(run.pk)
    wait_for(
        lambda: Step.objects.filter(run=run, seq=SLOW_READ_SEQ).exclude(finished_at=None).exists(),
        timeout=20,
        message="the interrupted read to end",
    )

    assert time.monotonic() - asked < 1.5
    runs.request_stop(run.pk)
