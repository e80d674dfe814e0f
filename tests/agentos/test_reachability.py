"""Telling an unreachable database (wait for it) and a full disk (refuse new work) from the
errors that are bugs, on errors raised by real connections; the backoff between attempts; one
log line each way per outage."""

from __future__ import annotations

import errno
import logging
import random

import peewee
import psycopg
import pytest
from django.db import DatabaseError, OperationalError, connections, transaction

from agentos.core import reachability
from tests.live import free_port


def refused_connection_error() -> psycopg.OperationalError:
    """What psycopg raises when nothing listens where the database should be."""
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(host="127.0.0.1", port=free_port(), user="x", dbname="x", connect_timeout=2)
    return refused.value


def statement_timeout_error() -> OperationalError:
    """An OperationalError of a server that answers."""
    try:
        with transaction.atomic(), connections["default"].cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 1")
            cursor.execute("SELECT pg_sleep(1)")
    except OperationalError as error:
        return error
    pytest.fail("the statement did not time out")


@pytest.mark.django_db
def test_it_tells_a_database_that_does_not_answer_from_a_query_that_failed() -> None:
    closed = connections.create_connection("default")
    closed.settings_dict = {**closed.settings_dict, "HOST": "127.0.0.1", "PORT": free_port()}
    with pytest.raises(DatabaseError) as unreachable:
        closed.ensure_connection()
    timed_out = statement_timeout_error()

    assert reachability.is_unreachable(unreachable.value)
    assert reachability.is_unreachable(refused_connection_error())
    assert not reachability.is_unreachable(timed_out)


def test_it_sees_through_the_queues_peewee_wrapper() -> None:
    wrapped = peewee.OperationalError(refused_connection_error())

    assert reachability.is_unreachable(wrapped)


def test_it_reads_shutdown_and_recovery_states_as_unreachable_but_not_a_statement_timeout() -> None:
    assert reachability.is_unreachable(psycopg.errors.AdminShutdown())  # 57P01
    assert reachability.is_unreachable(psycopg.errors.CannotConnectNow())  # 57P03: starting up
    assert not reachability.is_unreachable(psycopg.errors.QueryCanceled())  # 57014


def test_it_reads_a_full_disk_from_the_server_or_this_machine_and_not_as_unreachable() -> None:
    server = psycopg.errors.DiskFull()  # 53100: could not extend file
    local = OSError(errno.ENOSPC, "No space left on device")

    assert reachability.is_disk_full(server)
    assert reachability.is_disk_full(local)
    assert not reachability.is_unreachable(server)
    assert not reachability.is_disk_full(OSError(errno.EACCES, "Permission denied"))


def test_it_backs_off_exponentially_with_jitter_up_to_a_cap() -> None:
    backoff = reachability.Backoff(first=0.5, cap=30.0, rng=random.Random(7))  # noqa: S311  # reproducible

    delays = [backoff.next_delay() for _ in range(10)]

    for attempt, delay in enumerate(delays):
        full = min(30.0, 0.5 * 2**attempt)
        assert full / 2 <= delay <= full
    assert max(delays) <= 30.0
    assert delays[-1] >= 15.0
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_it_logs_one_line_when_the_database_goes_away_and_one_when_it_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = refused_connection_error()
    with caplog.at_level(logging.WARNING, logger="agentos.database"):
        for _ in range(5):
            reachability.went_away(error, where="kernel loop")
        assert reachability.is_down()
        for _ in range(3):
            reachability.came_back()

    lines = [r.getMessage() for r in caplog.records if r.name == "agentos.database"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("The database is unreachable (kernel loop: ")
    assert lines[1].startswith("The database is reachable again after ")
    assert not reachability.is_down()
