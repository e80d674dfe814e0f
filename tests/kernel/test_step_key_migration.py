"""Migration 0019 stops storing a step's idempotency key (it is computed from the run and the
seq); going back fills in the keys of the steps written since, the same ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from kernel import journal
from kernel.journal import Fence
from kernel.models import Step
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def latest() -> Iterator[list[tuple[str, str]]]:
    nodes = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        yield nodes
    finally:
        MigrationExecutor(connection).migrate(nodes)


def _keys() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT idempotency_key FROM kernel_step ORDER BY seq")
        return [row[0] for row in cursor.fetchall()]


def test_it_computes_the_keys_it_no_longer_stores_and_fills_them_in_going_back(
    latest: list[tuple[str, str]],
) -> None:
    run = start("chaos.noop", {"steps": 0})
    fence = Fence(run.pk, run.fence)
    for seq in (1, 2):
        journal.record_intent(
            fence, seq=seq, kind="tool_call", effect="idempotent_write", name="put", request={}
        )
    assert _keys() == ["", ""]
    expected = [journal.idempotency_key(run.pk, seq) for seq in (1, 2)]

    MigrationExecutor(connection).migrate([("kernel", "0018_step_events_from_step_rows")])
    assert _keys() == expected

    MigrationExecutor(connection).migrate(latest)
    assert _keys() == expected
    assert Step.objects.filter(run=run).count() == 2
