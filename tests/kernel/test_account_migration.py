"""An existing database moves to kernel accounts without loss: each mission becomes the account
its runs are charged to (same id, caps moved over), runs and events follow, and new missions
and accounts are numbered after the old ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from kernel.models import Account, Event, Run
from missions.models import Mission, Project

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [
    ("kernel", "0014_step_results_carry_their_trust"),
    ("missions", "0008_provider_keys_in_vault"),
]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def old_schema() -> Iterator[Any]:
    """The schema as it was before accounts; put back to the latest whatever happens."""
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        yield _migrate(BEFORE)
    finally:
        _migrate(latest)


def test_an_existing_database_moves_over_without_loss(old_schema: Any) -> None:
    OldProject = old_schema.get_model("missions", "Project")
    OldMission = old_schema.get_model("missions", "Mission")
    OldRun = old_schema.get_model("kernel", "Run")
    project = OldProject.objects.create(name="before accounts")
    capped = OldMission.objects.create(
        project=project,
        goal="capped",
        max_tokens=500,
        max_usd_micros=7,
        max_turns=3,
        max_tool_calls=4,
        max_concurrent_runs=2,
    )
    idle = OldMission.objects.create(project=project, goal="never ran", max_turns=9)
    run = OldRun.objects.create(mission=capped, program="chaos.noop", input_tokens=120, turns=2)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO kernel_event (at, mission_id, run_id, kind, trust, data)"
            " VALUES (%s, %s, %s, 'run.created', 'system', '{}')",
            [timezone.now(), capped.pk, run.pk],
        )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    mission = Mission.objects.get(pk=capped.pk)
    assert (mission.goal, mission.project_id) == ("capped", project.pk)
    assert (
        mission.max_tokens,
        mission.max_usd_micros,
        mission.max_turns,
        mission.max_tool_calls,
        mission.max_concurrent_runs,
    ) == (500, 7, 3, 4, 2)
    assert Mission.objects.get(pk=idle.pk).max_turns == 9
    moved = Run.objects.get(pk=run.pk)
    assert moved.account_id == capped.pk
    assert mission.spent()["tokens"] == 120
    assert Event.objects.get(run_id=run.pk, kind="run.created").account_id == capped.pk
    later = Mission.objects.create(project=Project.objects.get(pk=project.pk), goal="after")
    assert later.pk > idle.pk
    assert Account.objects.create().pk > later.pk
