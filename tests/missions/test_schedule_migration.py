"""An existing schedule keeps its mission when schedules move to templates: its project, goal
and definition of done become its template, it keeps its name, cron and state, reads its cron
in the installation's time zone (as before) and skips the times missed while agentos was down."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from missions.models import Schedule

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("missions", "0018_search_backend")]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def old_schema() -> Iterator[Any]:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        yield _migrate(BEFORE)
    finally:
        _migrate(latest)


def test_a_schedule_keeps_its_mission_as_a_template(old_schema: Any) -> None:
    OldProject = old_schema.get_model("missions", "Project")
    OldSchedule = old_schema.get_model("missions", "Schedule")
    project = OldProject.objects.create(name="before templates")
    digest = OldSchedule.objects.create(
        project=project,
        name="digest",
        goal="Digest.",
        definition_of_done="A digest exists.",
        cron="0 7 * * *",
        enabled=False,
    )
    plain = OldSchedule.objects.create(
        project=project, name="plain", goal="Plain.", cron="* * * * *"
    )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    moved = Schedule.objects.get(pk=digest.pk)
    assert moved.mission == {
        "project_id": project.pk,
        "goal": "Digest.",
        "definition_of_done": "A digest exists.",
    }
    assert (moved.name, moved.cron, moved.enabled) == ("digest", "0 7 * * *", False)
    assert (moved.timezone, moved.catch_up, moved.allow_overlap) == ("UTC", "skip", False)
    assert Schedule.objects.get(pk=plain.pk).mission == {"project_id": project.pk, "goal": "Plain."}
