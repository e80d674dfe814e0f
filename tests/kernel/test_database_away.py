"""The worker's loops while the database is unreachable: no claim, no traceback, a growing
backoff between attempts, one line each way; when it returns, the runs the outage cut short
are given back at once instead of when their leases expire."""

from __future__ import annotations

import logging
import time

import pytest
from django.db import connection

from agentos.core import reachability
from agentos.queue import PostgresStorage
from kernel import heartbeats
from kernel.context import RunContext
from kernel.programs import PROGRAMS, Outcome
from kernel.worker import Worker
from tests.kernel.factories import start
from tests.live import free_port
from tests.outages import database_unreachable
from tests.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def idle(ctx: RunContext) -> Outcome:
    return Outcome()


PROGRAMS.add("test.idle", idle)


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agentos.database"]


def test_the_kernel_loop_backs_off_while_the_database_is_away_and_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = start("test.idle", {})
    worker = Worker(name="test-worker")
    with caplog.at_level(logging.INFO), database_unreachable():
        delays = []
        for _ in range(4):
            assert worker._claim(1) == []
            assert worker.retry_in is not None
            delays.append(worker.retry_in)

    assert 0.25 <= delays[0] <= 0.5
    assert 2.0 <= delays[3] <= 4.0  # doubling: 0.5, 1, 2, 4 (each drawn in its upper half)
    assert not [r for r in caplog.records if r.exc_info]  # no traceback per attempt
    claims = worker._claim(1)
    assert [claim.fence.run_id for claim in claims] == [run.pk]
    assert worker.retry_in is None
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines  # reachable again: logged on the successful claim
    assert lines[0].startswith("The database is unreachable (kernel loop: ")
    assert lines[1].startswith("The database is reachable again after ")


def test_a_run_the_outage_cut_short_is_given_back_when_the_database_returns() -> None:
    run = start("test.idle", {})
    worker = Worker(name="test-worker", lease_seconds=300)
    (claim,) = worker._claim(1)
    worker.cut_short.append(claim.fence)  # what `execute` said: the database went away under it
    with database_unreachable():
        assert worker._claim(1) == []
    assert worker.cut_short == [claim.fence]  # kept until the database answers

    (again,) = worker._claim(1)

    assert worker.cut_short == []
    assert again.fence.run_id == run.pk
    assert again.fence.token > claim.fence.token  # released, then claimed anew: not after 300 s


def test_the_task_queue_answers_nothing_to_do_while_the_database_is_away(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = PostgresStorage(
        name="agentos", database=f"postgresql://nobody@127.0.0.1:{free_port()}/nothing"
    )
    with caplog.at_level(logging.INFO):
        assert storage.dequeue() is None
        assert storage.read_schedule(time.time()) == []
        first_retry = storage.retry_at
        assert first_retry > time.monotonic()
        # The database came back at the address the queue knows.
        entry = connection.settings_dict
        storage.database.init(
            entry["NAME"], host=entry["HOST"], port=entry["PORT"] or 5432, user=entry["USER"]
        )
        wait_for(
            lambda: storage.dequeue() is None and storage.retry_at == 0.0,
            timeout=10,
            message="the queue to read again",
        )

    assert not [r for r in caplog.records if r.exc_info]
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("The database is unreachable (task queue: ")
    assert not reachability.is_down()


def test_a_heartbeat_missed_while_the_database_is_away_is_one_line_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO), database_unreachable():
        assert [heartbeats.beat_one(worker="node:1") for _ in range(3)] == [False] * 3

    assert heartbeats.beat_one(worker="node:1")
    assert not [r for r in caplog.records if r.exc_info]
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("The database is unreachable (heartbeat: ")
