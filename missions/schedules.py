"""Recurring missions: the owner's edits (create, change, pause, delete) and what the screens
and the API read (the next times, the history). The console and the API call these same
functions; firing them is `missions.firing`.

A schedule's mission is a template (the body of POST /api/v1/missions), checked by
`missions.blueprints.clean` when it is stored and started by `missions.blueprints.start`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from agentos.core import audit
from agentos.core.models import AuditEvent
from missions import blueprints, cron
from missions.errors import MissionError
from missions.launch import mcp_server_names
from missions.models import CatchUp, Schedule, ScheduleFiring, default_timezone

NAME_LENGTH = 120
SCHEDULE_FIELDS = ("name", "cron", "timezone", "mission", "catch_up", "allow_overlap", "enabled")


def create_schedule(
    *,
    cron: str,
    mission: Any,
    name: str = "",
    time_zone: str | None = None,
    catch_up: str = CatchUp.SKIP,
    allow_overlap: bool = False,
    enabled: bool = True,
    actor: audit.Actor,
) -> Schedule:
    """A new recurring mission, validated (cron, time zone, template) before it is saved; its
    name is its goal's first line when none is given, its time zone the installation's."""
    schedule = Schedule(last_fired_at=None)
    values = {
        "name": name,
        "cron": cron,
        "timezone": time_zone or default_timezone(),
        "mission": mission,
        "catch_up": catch_up,
        "allow_overlap": allow_overlap,
        "enabled": enabled,
    }
    with transaction.atomic():
        saved = _save(schedule, values)
        _changed(actor, saved, "created")
    return saved


def update_schedule(schedule_id: int, changes: dict[str, Any], *, actor: audit.Actor) -> Schedule:
    """Change some fields of a schedule, all or nothing. `mission` replaces the whole template.
    Resumed, or given a new cron or time zone, it counts its times from now: what it did not
    run while paused is not missed."""
    unknown = set(changes) - set(SCHEDULE_FIELDS)
    if unknown:
        raise MissionError(f"Unknown schedule fields: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().filter(pk=schedule_id).first()
        if schedule is None:
            raise _not_found(schedule_id)
        restarts = (changes.get("enabled") is True and not schedule.enabled) or any(
            name in changes and changes[name] != getattr(schedule, name)
            for name in ("cron", "timezone")
        )
        if restarts:
            schedule.last_fired_at = timezone.now()
        saved = _save(schedule, {"name": schedule.name, **changes})
        _changed(actor, saved, "changed: " + ", ".join(sorted(changes)))
    return saved


def set_enabled(schedule_id: int, enabled: bool, *, actor: audit.Actor) -> Schedule:
    """Pause or resume a schedule."""
    return update_schedule(schedule_id, {"enabled": enabled}, actor=actor)


def delete_schedule(schedule_id: int, *, actor: audit.Actor) -> None:
    """A schedule and its history; the missions it started stay."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().filter(pk=schedule_id).first()
        if schedule is None:
            raise _not_found(schedule_id)
        _changed(actor, schedule, "deleted")
        schedule.delete()


def _changed(actor: audit.Actor, schedule: Schedule, change: str) -> None:
    # In the change's transaction: the security log says what happened, never more.
    audit.record_by(
        AuditEvent.Kind.SCHEDULE_CHANGED,
        actor,
        schedule=schedule.pk,
        name=schedule.name,
        change=change,
        by=actor.by,
    )


def get_schedule(schedule_id: int) -> Schedule:
    schedule = Schedule.objects.filter(pk=schedule_id).first()
    if schedule is None:
        raise _not_found(schedule_id)
    return schedule


def next_times(schedule: Schedule, *, now: datetime | None = None) -> list[datetime]:
    """Its next five due times in its time zone; none when it never comes (or is invalid)."""
    try:
        return cron.next_times(
            schedule.cron, cron.zone(schedule.timezone), now=now or timezone.now()
        )
    except ValueError:
        return []


def preview(expression: str, zone_name: str, *, now: datetime | None = None) -> list[datetime]:
    """The next five times of an expression not yet saved; ValueError saying what is wrong."""
    return cron.next_times(expression.strip(), cron.zone(zone_name), now=now or timezone.now())


def history(schedule_id: int, *, limit: int = 100) -> QuerySet[ScheduleFiring]:
    """Its firings, newest due time first."""
    get_schedule(schedule_id)
    return ScheduleFiring.objects.filter(schedule_id=schedule_id).order_by("-due_at")[:limit]


def default_name(template: dict[str, Any]) -> str:
    goal = str(template.get("goal") or "").strip()
    if goal:
        return goal.splitlines()[0][:NAME_LENGTH].strip()
    if template.get("offline"):
        return f"{template['offline']}"
    return "schedule"


def _save(schedule: Schedule, values: dict[str, Any]) -> Schedule:
    """Every field's problem at once (422, `details.fields`), or the schedule saved."""
    problems: dict[str, list[str]] = {}
    if "mission" in values:
        try:
            values["mission"] = _template(values["mission"])
        except MissionError as refused:
            problems.update(_fields_of(refused, prefix="mission"))
    for name, value in values.items():
        setattr(schedule, name, value.strip() if isinstance(value, str) else value)
    if not schedule.name:
        template = schedule.mission if isinstance(schedule.mission, dict) else {}
        schedule.name = default_name(template)
    try:
        schedule.full_clean(exclude=["mission"])
    except ValidationError as error:
        for field, messages in error.message_dict.items():
            problems.setdefault(field, []).extend(messages)
    if problems:
        raise MissionError(
            "The schedule is not valid: "
            + "; ".join(f"{field}: {' '.join(messages)}" for field, messages in problems.items()),
            code="invalid_input",
            status=422,
            details={"fields": problems},
        )
    schedule.save()
    return schedule


def _template(data: Any) -> dict[str, Any]:
    template = blueprints.clean(data)
    try:
        # Checked now as they would be at each firing: a name that can never start is refused.
        mcp_server_names(template.get("mcp_servers", []))
    except MissionError as refused:
        raise MissionError(
            refused.message, status=422, details={"fields": {"mcp_servers": [refused.message]}}
        ) from None
    return template


def _fields_of(refused: MissionError, *, prefix: str) -> dict[str, list[str]]:
    details = refused.details if isinstance(refused.details, dict) else {}
    fields = details.get("fields") if isinstance(details.get("fields"), dict) else None
    if not fields:
        return {prefix: [refused.message]}
    # The template's own problems (no goal, say) are said of it, not of a field inside it.
    return {
        prefix if name == prefix else f"{prefix}.{name}": list(messages)
        for name, messages in fields.items()
    }


def _not_found(schedule_id: int) -> MissionError:
    return MissionError(f"No schedule {schedule_id}.", code="not_found", status=404)
