"""The real channel layer (channels-postgres) called from synchronous code, as workers do: its
pool must refill after the database drops its connections (a restart), not time out forever."""

from __future__ import annotations

from collections.abc import Iterator

import channels_postgres.db
import pytest
from channels_postgres.core import PostgresChannelLayer
from django.db import connection
from pytest_django.fixtures import Settings

from kernel import bus
from tests.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
APPLICATION = "agentos-test-layer"


@pytest.fixture
def layer(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[PostgresChannelLayer]:
    settings.DOORBELLS_IN_BACKGROUND = True  # the workers' way: no event loop of their own
    # As in a worker process: no loop adopted yet (in-process ASGI tests adopt theirs).
    monkeypatch.setattr(bus, "_loop", None)
    config = {
        **settings.DATABASES["default"],
        "TIME_ZONE": None,
        # A short wait for a connection, and a name to find the pool's connections by.
        "PSYCOPG_OPTIONS": {
            "timeout": 2,
            "min_size": 2,
            "max_size": 2,
            "kwargs": {"application_name": APPLICATION},
        },
    }
    # The process's pool is a global of channels-postgres: this test opens its own, then puts
    # back whatever an earlier test left there.
    earlier, channels_postgres.db.connection_pool = channels_postgres.db.connection_pool, None
    yield PostgresChannelLayer(**config)
    pool, channels_postgres.db.connection_pool = channels_postgres.db.connection_pool, earlier
    if pool is not None:
        bus.layer_call(pool.close)


def drop_the_pools_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            [APPLICATION],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def test_a_worker_reaches_the_layer_again_after_the_database_dropped_its_connections(
    layer: PostgresChannelLayer,
) -> None:
    message = {"type": "doorbell", "kind": "test"}
    bus.layer_call(layer.group_send, bus.OWNER_GROUP, message)  # opens the pool
    bus.layer_call(layer.group_send, bus.OWNER_GROUP, message)  # and reuses it
    assert drop_the_pools_connections() >= 1

    errors: list[str] = []

    def sent() -> bool:
        try:
            bus.layer_call(layer.group_send, bus.OWNER_GROUP, message)
        except Exception as error:  # the broken connection fails once, then the pool refills
            errors.append(type(error).__name__)
            return False
        return True

    wait_for(sent, timeout=15, message="the layer to come back", interval=0.1)
    assert len(errors) <= 2, errors  # at most once per connection the pool held
    # It went through the process's own loop, still running, not a loop made for the call.
    assert bus._loop is not None
    assert bus._loop.is_running()
