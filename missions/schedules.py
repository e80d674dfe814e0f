"""Recurring missions: cron expressions, the minute task that starts what is due, and the
owner's edits (create, change, delete), validated as the admin validates them."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from missions.cron import parse_cron
from missions.errors import MissionError
from missions.launch import create_mission
from missions.models import Project, Schedule

logger = logging.getLogger(__name__)


def fire_due(now: datetime | None = None) -> list[int]:
    """Start a mission for each enabled schedule due this minute, once (a row lock and the
    minute it last fired make a second worker, or a retry, a no-op). Returns the missions."""
    minute = (now or timezone.now()).replace(second=0, microsecond=0)
    started: list[int] = []
    for schedule_id in Schedule.objects.filter(enabled=True).values_list("pk", flat=True):
        with transaction.atomic():
            schedule = (
                Schedule.objects.select_for_update(skip_locked=True)
                .select_related("project")
                .filter(pk=schedule_id, enabled=True)
                .first()
            )
            if schedule is None or (schedule.last_fired_at and schedule.last_fired_at >= minute):
                continue
            try:
                due = parse_cron(schedule.cron)(timezone.localtime(minute))
            except ValueError:
                logger.warning("schedule %s has an invalid cron expression", schedule.pk)
                continue
            if not due:
                continue
            schedule.last_fired_at = minute
            schedule.save(update_fields=["last_fired_at"])
            mission, _run = create_mission(
                project=schedule.project,
                goal=schedule.goal,
                definition_of_done=schedule.definition_of_done,
                trigger=f"schedule:{schedule.pk}",
            )
            started.append(mission.pk)
    return started


SCHEDULE_FIELDS = ("project", "name", "goal", "definition_of_done", "cron", "enabled")


def create_schedule(
    *,
    project: Project,
    name: str,
    goal: str,
    cron: str,
    definition_of_done: str = "",
    enabled: bool = True,
) -> Schedule:
    """A new recurring mission, validated (cron expression included) before it is saved."""
    schedule = Schedule(project=project)
    return _save(
        schedule,
        {
            "name": name,
            "goal": goal,
            "definition_of_done": definition_of_done,
            "cron": cron,
            "enabled": enabled,
        },
    )


def update_schedule(schedule_id: int, changes: dict[str, Any]) -> Schedule:
    """Change some fields of a schedule; all or nothing."""
    unknown = set(changes) - set(SCHEDULE_FIELDS)
    if unknown:
        raise MissionError(f"Unknown schedule fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().filter(pk=schedule_id).first()
        if schedule is None:
            raise MissionError(f"No schedule {schedule_id}.", code="not_found", status=404)
        return _save(schedule, changes)


def delete_schedule(schedule_id: int) -> None:
    deleted, _by_model = Schedule.objects.filter(pk=schedule_id).delete()
    if not deleted:
        raise MissionError(f"No schedule {schedule_id}.", code="not_found", status=404)


def _save(schedule: Schedule, values: dict[str, Any]) -> Schedule:
    for name, value in values.items():
        setattr(schedule, name, value.strip() if isinstance(value, str) else value)
    try:
        schedule.full_clean()
    except ValidationError as error:
        fields = error.message_dict
        raise MissionError(
            "The schedule is not valid: "
            + "; ".join(f"{field}: {' '.join(messages)}" for field, messages in fields.items()),
            code="invalid_input",
            status=422,
            details={"fields": fields},
        ) from error
    schedule.save()
    return schedule
