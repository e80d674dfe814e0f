"""Recurring missions: cron expressions, and the minute task that starts what is due."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from huey import crontab

from missions.models import Schedule

logger = logging.getLogger(__name__)


def parse_cron(expression: str) -> Callable[[datetime], bool]:
    """A matcher for a five-field cron expression; ValueError with the reason otherwise."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"A cron expression has five fields (minute hour day month weekday), not"
            f" {len(fields)}: {expression!r}."
        )
    minute, hour, day, month, weekday = fields
    try:
        matcher: Callable[[datetime], bool] = crontab(minute, hour, day, month, weekday)
    except ValueError as error:
        raise ValueError(f"Invalid cron expression {expression!r}: {error}.") from error
    return matcher


def fire_due(now: datetime | None = None) -> list[int]:
    """Start a mission for each enabled schedule due this minute, once (a row lock and the
    minute it last fired make a second worker, or a retry, a no-op). Returns the missions."""
    from missions.launch import create_mission

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
