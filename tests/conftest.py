from __future__ import annotations

import pytest
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
    "tests/agentos/test_serve.py",
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
    _flush_again_after_a_deadlock()


def _flush_again_after_a_deadlock() -> None:
    """A live stack kept for a whole module (`tests.live.running_stack`) may be inside a
    transaction when a test's teardown truncates every table: PostgreSQL then breaks the deadlock
    by failing the TRUNCATE, whose retry finds the stack's transaction gone."""
    import psycopg
    from django.db import OperationalError
    from django.test import TransactionTestCase

    teardown = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]

    def flush_until_done(case: TransactionTestCase) -> None:
        for attempt in range(5):
            try:
                teardown(case)
                return
            except OperationalError as error:
                if attempt == 4 or not isinstance(error.__cause__, psycopg.errors.DeadlockDetected):
                    raise

    TransactionTestCase._fixture_teardown = flush_until_done  # type: ignore[attr-defined]


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
