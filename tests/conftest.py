from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.core.management.color import Style
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.operations import BaseDatabaseOperations
from django.test import Client
from pytest_django import DjangoDbBlocker

from kernel import proving
from missions import catalog, profile_seeds
from missions.models import ModelInfo, ModelPrice, Profile, RoleRoute
from tests.factories import Owner, make_owner, verified_client

# Tests that kill processes, boot virtual machines, start SSH nodes, a browser or the whole stack,
# or wait on deadlines measured in seconds: `make test` runs them after the others, one at a
# time, so that no other test's load stretches their deadlines; the others run on every core
# (pytest-xdist, each worker with its own database and data dir).
SERIAL = (
    "tests/browser/",
    "tests/chaos/",
    "tests/cluster/test_nodes.py",
    "tests/cluster/test_second_machine.py",
    "tests/cluster/test_shipping.py",
    "tests/cluster/test_vm.py",
    "tests/cluster/test_vm_warm.py",
    "tests/cluster/test_vm_exfiltration.py",
    "tests/missions/test_stop_streaming.py",
    "tests/missions/test_web_browser.py",
    "tests/tools/test_cancel.py::test_a_stop_kills_the_sandbox_within_a_second",
)


def pytest_configure(config: pytest.Config) -> None:
    # The kernel's tests run its chaos workload in this process (`kernel.proving`); the worker
    # processes they start register it themselves (`manage.py proving_worker`).
    proving.register()
    _flush_by_deleting()
    _flush_again_after_a_deadlock()


def _flush_by_deleting() -> None:
    """Empty the tables after each transactional test (~600 of them) by deleting their rows
    instead of truncating them: TRUNCATE gives each table and index a new file and rewrites its
    catalog rows, ~1-2 s for every table at once; deleting a test's few rows takes ~0.05 s.

    Same end, same guarantees: the tables are locked first, so that a writer still inside a
    transaction (a live stack's worker) commits before the rows go, as TRUNCATE waited for it;
    triggers are off while deleting (`session_replication_role`, a superuser's setting), as
    TRUNCATE fires no row trigger, and foreign keys, checked by triggers, need no order. Without
    a superuser (a database of the owner's), or asked to reset sequences, it truncates."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        ops: BaseDatabaseOperations,
        style: Style,
        tables: Sequence[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or not tables or not _superuser(ops.connection):
            return truncate(
                ops, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        names = [ops.quote_name(table) for table in tables]
        return [
            "SET LOCAL session_replication_role = replica",
            f"LOCK TABLE {', '.join(names)} IN EXCLUSIVE MODE",
            *(f"DELETE FROM {name}" for name in names),  # noqa: S608  # quoted table names
            "SET LOCAL session_replication_role TO DEFAULT",
        ]

    # A function assigned to a class is a method: mypy types it as unbound, self twice.
    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign,assignment]


def _superuser(connection: BaseDatabaseWrapper) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('is_superuser') = 'on'")
        return bool(cursor.fetchone()[0])


def _flush_again_after_a_deadlock() -> None:
    """A live stack kept for a whole module (`tests.live.running_stack`) may be inside a
    transaction when a test's teardown locks every table: PostgreSQL then breaks the deadlock
    by failing the flush, whose retry finds the stack's transaction gone. The flush command
    reports it as a CommandError, caused by the database's error."""
    import psycopg
    from django.core.management.base import CommandError
    from django.db import OperationalError
    from django.test import TransactionTestCase

    teardown = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]

    def flush_until_done(case: TransactionTestCase) -> None:
        for attempt in range(5):
            try:
                teardown(case)
                return
            except (CommandError, OperationalError) as error:
                if attempt == 4 or not _caused_by(error, psycopg.errors.DeadlockDetected):
                    raise

    TransactionTestCase._fixture_teardown = flush_until_done  # type: ignore[attr-defined]


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, kind):
        cause = cause.__cause__
    return cause is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


@pytest.fixture
def owner(db: None) -> Owner:
    return make_owner()


@pytest.fixture
def owner_client(owner: Owner) -> Client:
    return verified_client(owner)


@pytest.fixture
def seeded_catalog(django_db_blocker: DjangoDbBlocker) -> None:
    """Prices, catalog and routes as the migration seeds them: transactional tests flush every
    table, data migrations' rows included, so tests that need them seed again (idempotent)."""
    with django_db_blocker.unblock():
        catalog.seed(ModelPrice, ModelInfo, RoleRoute)


@pytest.fixture
def seeded_profiles(django_db_blocker: DjangoDbBlocker) -> None:
    """The domain profiles as their migration seeds them (flushed by transactional tests)."""
    with django_db_blocker.unblock():
        profile_seeds.seed(Profile)
