"""Firing schedules: each minute (`missions.tasks.fire_schedules`), every enabled schedule starts
the missions it is due, deals with the times it missed while agentos was down (its catch-up
policy), and leaves one history line (`ScheduleFiring`) per due time.

Crash safety (docs/design.md §12): a schedule's firings, the missions they start and its
`last_fired_at` are written in one transaction, and a due time has one firing at most (a
unique constraint). Killed anywhere, a firing is either whole or redone by the next call, never
lost and never doubled. One schedule's failure is its own history line: the others still fire.
"""

from __future__ import annotations

import logging
from collections import deque
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentos.core.errors import DomainError
from kernel.models import TERMINAL, Run
from missions import blueprints, cron
from missions.models import CatchUp, FiringOutcome, Schedule, ScheduleFiring

logger = logging.getLogger(__name__)

# A due time this recent is on time (the minute task ran late, not agentos down); older ones
# missed by the last call are caught up by the schedule's policy.
GRACE = timedelta(minutes=5)
# How far back, and how many, missed times are looked at after a downtime.
CATCH_UP_WINDOW = timedelta(days=31)
CATCH_UP_MAX = 1000


def fire_due(now: datetime | None = None) -> list[int]:
    """Fire every enabled schedule that is due; returns the missions started.

    1. List the enabled schedules.
    2. Fire each in its own transaction (`fire_one`); one that raises is logged and written
       on its own history line, and the next one fires all the same.
    """
    now = now or timezone.now()
    started: list[int] = []
    for schedule_id in Schedule.objects.filter(enabled=True).values_list("pk", flat=True):
        try:
            started.extend(fire_one(schedule_id, now=now))
        # Whatever went wrong (the database refused a write, a bug), the others still fire.
        except Exception as error:
            logger.exception("schedule %s could not be fired", schedule_id)
            _record_failure(schedule_id, now, f"{type(error).__name__}: {error}")
    return started


def fire_one(schedule_id: int, *, now: datetime) -> list[int]:
    """Fire one schedule's due times up to `now`; returns the missions started.

    1. Lock the schedule (SKIP LOCKED: a second worker leaves it to the first).
    2. List the due times since it last fired (bounded), less any already on its history.
    3. Split them by its catch-up policy: those to start, those to skip.
    4. Record the skipped ones, start the others (each in a savepoint), move `last_fired_at`.
    """
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(skip_locked=True)
            .filter(pk=schedule_id, enabled=True)
            .first()
        )
        if schedule is None:
            return []
        try:
            due = _due_times(schedule, now)
        except ValueError as error:  # stored before it was checked, or edited in the database
            _note_invalid(schedule, now, str(error))
            return []
        if not due:
            return []
        to_start, to_skip = _by_policy(schedule.catch_up, due, now)
        for due_at in to_skip:
            _record(schedule, due_at, FiringOutcome.SKIPPED_CATCH_UP)
        started = [pk for due_at in to_start if (pk := _start(schedule, due_at)) is not None]
        schedule.last_fired_at = due[-1]
        schedule.save(update_fields=["last_fired_at"])
    return started


def _due_times(schedule: Schedule, now: datetime) -> list[datetime]:
    since = max(schedule.last_fired_at or schedule.created_at, now - CATCH_UP_WINDOW)
    times = deque(
        cron.due_times(schedule.cron, cron.zone(schedule.timezone), after=since, until=now),
        maxlen=CATCH_UP_MAX,
    )
    if not times:
        return []
    done = set(
        ScheduleFiring.objects.filter(
            schedule=schedule, due_at__gte=times[0], due_at__lte=times[-1]
        ).values_list("due_at", flat=True)
    )
    return [due_at for due_at in times if due_at not in done]


def _by_policy(
    policy: str, due: list[datetime], now: datetime
) -> tuple[list[datetime], list[datetime]]:
    """(to start, to skip): the latest due time, when recent, is on time; the others were
    missed, and the policy says what becomes of them."""
    on_time = due[-1] if due[-1] > now - GRACE else None
    missed = due[:-1] if on_time else due
    if policy == CatchUp.EACH:
        return due, []
    if policy == CatchUp.ONCE and missed and not on_time:
        return missed[-1:], missed[:-1]
    return ([on_time] if on_time else []), missed


def _start(schedule: Schedule, due_at: datetime) -> int | None:
    """Start one mission for `due_at`, or say on its history line why not."""
    if not schedule.allow_overlap and _still_running(schedule):
        _record(schedule, due_at, FiringOutcome.SKIPPED_OVERLAP)
        return None
    try:
        # A savepoint: a refusal undoes this mission only, and the schedule goes on.
        with transaction.atomic():
            mission, _run = blueprints.start(schedule.mission, trigger=f"schedule:{schedule.pk}")
            ScheduleFiring.objects.create(
                schedule=schedule, due_at=due_at, outcome=FiringOutcome.STARTED, mission=mission
            )
    except DomainError as refused:  # its project is gone, a cap, no provider key
        _record(schedule, due_at, FiringOutcome.FAILED, refused.message)
        return None
    except IntegrityError:
        # Another call fired this due time first: the constraint undid this one's mission.
        return None
    except Exception as error:  # a bug or the database: this due time fails, not the others
        logger.exception("schedule %s could not start its mission", schedule.pk)
        _record(schedule, due_at, FiringOutcome.FAILED, f"{type(error).__name__}: {error}")
        return None
    return int(mission.pk)


def _still_running(schedule: Schedule) -> bool:
    """Whether the mission it last started still has a root run that has not finished."""
    last = (
        schedule.firings.filter(outcome=FiringOutcome.STARTED, mission__isnull=False)
        .order_by("-due_at")
        .values_list("mission_id", flat=True)
        .first()
    )
    if last is None:
        return False
    return (
        Run.objects.filter(account_id=last, parent__isnull=True)
        .exclude(status__in=TERMINAL)
        .exists()
    )


def _record(schedule: Schedule, due_at: datetime, outcome: str, error: str = "") -> None:
    ScheduleFiring.objects.create(schedule=schedule, due_at=due_at, outcome=outcome, error=error)


def _note_invalid(schedule: Schedule, now: datetime, error: str) -> None:
    # Said once, not each minute: a new line only when the last one does not say it already.
    last = schedule.firings.order_by("-due_at").first()
    if last is None or last.outcome != FiringOutcome.FAILED or last.error != error:
        _record(schedule, now.replace(second=0, microsecond=0), FiringOutcome.FAILED, error)


def _record_failure(schedule_id: int, now: datetime, error: str) -> None:
    """The history line of a schedule whose firing raised (its own transaction rolled back)."""
    try:
        with transaction.atomic():
            schedule = Schedule.objects.filter(pk=schedule_id).first()
            if schedule is not None:
                _note_invalid(schedule, now, error)
    except Exception:  # the database itself may be what failed: the log has it already
        logger.exception("schedule %s: its failure could not be recorded", schedule_id)
