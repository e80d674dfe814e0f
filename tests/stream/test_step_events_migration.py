"""Migration 0018 moves step events from triggers to the sequencer without losing or repeating
one: steps the triggers announced stay announced, an unfinished step still completes once, and
going back writes out what the sequencer had not derived yet and puts the triggers back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from kernel import journal, stream
from kernel.budgets import NO_COST
from kernel.journal import Fence
from kernel.models import Event, Run, Step
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("kernel", "0017_steer_notifications")]


def _migrate(targets: list[tuple[str, str]]) -> None:
    MigrationExecutor(connection).migrate(targets)


@pytest.fixture
def latest() -> Iterator[list[tuple[str, str]]]:
    nodes = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        yield nodes
    finally:
        _migrate(nodes)


def _step(run: Run, seq: int, *, finished: bool) -> None:
    """A write step as the journal of 0017 wrote it (its triggers announce it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO kernel_step (run_id, seq, kind, effect, name, request, request_hash,"
            " idempotency_key, started_at, settled_by, executions, input_tokens, output_tokens,"
            " cache_read_tokens, cache_write_tokens, usd_micros)"
            " VALUES (%s, %s, 'tool_call', 'idempotent_write', 'put', '{}', '', '', now(), '',"
            " 0, 0, 0, 0, 0, 0)",
            [run.pk, seq],
        )
        if finished:
            cursor.execute(
                "UPDATE kernel_step SET result = '{}', finished_at = now(), settled_by = 'executed'"
                " WHERE run_id = %s AND seq = %s",
                [run.pk, seq],
            )


def _announced() -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq, announced FROM kernel_step")
        return dict(cursor.fetchall())


def _step_events(run: Run) -> list[tuple[str, int | None]]:
    stream.sequence()
    return [(e["kind"], e["seq"]) for e in stream.page(0, 100) if e["kind"].startswith("step.")]


def test_it_announces_every_step_once_across_the_migration_both_ways(
    latest: list[tuple[str, str]],
) -> None:
    run = start("chaos.noop", {"steps": 0})
    _migrate(BEFORE)
    _step(run, 1, finished=True)
    _step(run, 2, finished=False)
    assert Event.objects.filter(kind__startswith="step.").count() == 3

    _migrate(latest)
    assert _announced() == {1: 2, 2: 1}  # step 2's start is announced, its end is not yet
    fence = Fence(run.pk, Run.objects.get(pk=run.pk).fence)
    journal.record_result(fence, seq=2, result={}, cost=NO_COST)
    journal.record_intent(
        fence, seq=3, kind="tool_call", effect="idempotent_write", name="put", request={}
    )
    assert _step_events(run) == [
        ("step.started", 1),
        ("step.completed", 1),
        ("step.started", 2),
        ("step.completed", 2),
        ("step.started", 3),
    ]

    journal.record_result(fence, seq=3, result={}, cost=NO_COST)  # not sequenced yet
    _migrate(BEFORE)
    _step(run, 4, finished=True)  # the triggers are back
    _migrate(latest)

    assert _step_events(run) == [
        ("step.started", 1),
        ("step.completed", 1),
        ("step.started", 2),
        ("step.completed", 2),
        ("step.started", 3),
        ("step.completed", 3),
        ("step.started", 4),
        ("step.completed", 4),
    ]
    assert Step.objects.filter(run=run).count() == 4
