"""Schedules over /api/v1: recurring missions, each a cron expression read in a time zone and a
mission template (the body of POST /api/v1/missions), and the history of their firings.

Edits go through `missions.schedules`, as from the console; firing is `missions.firing`. A
refused edit writes nothing (422 naming each wrong field, 404 for an unknown schedule).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, StrictBool

from agentos.core import audit
from agentos.core.schemas import Text
from missions import schedules
from missions.blueprints import MissionIn
from missions.models import Schedule, ScheduleFiring

router = Router(tags=["schedules"])

CatchUpName = Literal["skip", "once", "each"]

CRON = (
    "Five fields, minute hour day-of-month month day-of-week (0 = Sunday): numbers, *, a-b,"
    " a,b and */n; e.g. 0 7 * * 1-5"
)
TIMEZONE = "An IANA time zone name the cron is read in, e.g. Europe/Paris; default the server's"
CATCH_UP = (
    "What becomes of the times missed while agentos was down: skip (recorded as skipped, none"
    " started), once (one mission for the latest), each (one per missed time, at most 1,000"
    " and 31 days back). Default skip"
)
OVERLAP = (
    "Start a mission even while the one it started last still has an unfinished root run;"
    " by default such a time is skipped and recorded as skipped_overlap"
)
ENABLED = "false pauses the schedule, true resumes it (its times missed while paused are not run)"
MISSION = "The mission each firing starts: the body of POST /api/v1/missions"


class ScheduleIn(Schema):
    model_config = ConfigDict(extra="forbid")

    name: Text = Field("", max_length=120, description="Default: the first line of the goal")
    cron: Text = Field(max_length=100, description=CRON)
    timezone: Text = Field("", max_length=64, description=TIMEZONE)
    mission: MissionIn = Field(description=MISSION)
    catch_up: CatchUpName = Field("skip", description=CATCH_UP)
    allow_overlap: StrictBool = Field(False, description=OVERLAP)
    enabled: StrictBool = Field(True, description=ENABLED)


class SchedulePatch(Schema):
    model_config = ConfigDict(extra="forbid")

    # Absent: unchanged; never null (the type: ignores say so to mypy).
    name: Text = Field(None, max_length=120)  # type: ignore[assignment]  # never null
    cron: Text = Field(None, max_length=100, description=CRON)  # type: ignore[assignment]  # idem
    timezone: Text = Field(None, max_length=64, description=TIMEZONE)  # type: ignore[assignment]
    mission: MissionIn = Field(  # type: ignore[assignment]  # idem
        None, description=MISSION + ", replacing the whole template"
    )
    catch_up: CatchUpName = Field(None, description=CATCH_UP)  # type: ignore[arg-type]  # idem
    allow_overlap: StrictBool = Field(None, description=OVERLAP)  # type: ignore[assignment]  # idem
    enabled: StrictBool = Field(None, description=ENABLED)  # type: ignore[assignment]  # idem


class ScheduleOut(Schema):
    id: int
    name: str
    cron: str
    timezone: str
    mission: dict[str, Any] = Field(description="The template, with the fields it sets")
    catch_up: str
    allow_overlap: bool
    enabled: bool
    next_times: list[datetime] = Field(
        description="Its next five due times in its time zone; empty: it never comes (in five"
        " years) or it is paused"
    )
    last_fired_at: datetime | None = Field(description="The last due time it dealt with")
    created_at: datetime


class FiringOut(Schema):
    id: int
    due_at: datetime
    fired_at: datetime
    outcome: Literal["started", "skipped_overlap", "skipped_catch_up", "failed"]
    mission_id: int | None
    error: str = Field(description="Why it failed, when it did")


def schedule_out(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.pk,
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "mission": schedule.mission,
        "catch_up": schedule.catch_up,
        "allow_overlap": schedule.allow_overlap,
        "enabled": schedule.enabled,
        "next_times": schedules.next_times(schedule) if schedule.enabled else [],
        "last_fired_at": schedule.last_fired_at,
        "created_at": schedule.created_at,
    }


def _values(payload: Schema) -> dict[str, Any]:
    values = payload.model_dump(exclude_unset=True)
    mission = getattr(payload, "mission", None)
    if isinstance(mission, MissionIn):
        # Only the fields the caller set: the template is stored as it was given.
        values["mission"] = mission.model_dump(mode="json", exclude_unset=True)
    return values


@router.get("/schedules", response=list[ScheduleOut], summary="Schedules")
def list_schedules(request: HttpRequest) -> list[dict[str, Any]]:
    return [schedule_out(schedule) for schedule in Schedule.objects.all()]


@router.post(
    "/schedules",
    response={201: ScheduleOut},
    summary="Create a recurring mission",
    description="A cron expression read in a time zone, and the mission each due time starts."
    ' Paused with PATCH {"enabled": false}, resumed with {"enabled": true}.',
)
def create_schedule(request: HttpRequest, payload: ScheduleIn) -> Status[dict[str, Any]]:
    values = _values(payload)
    values["time_zone"] = values.pop("timezone", "")
    return Status(
        201, schedule_out(schedules.create_schedule(**values, actor=audit.Actor.of(request)))
    )


@router.get("/schedules/{schedule_id}", response=ScheduleOut, summary="A schedule")
def get_schedule(request: HttpRequest, schedule_id: int) -> dict[str, Any]:
    return schedule_out(schedules.get_schedule(schedule_id))


@router.patch(
    "/schedules/{schedule_id}",
    response=ScheduleOut,
    summary="Change, pause or resume a schedule",
    description="Only the fields given change; `mission` replaces the whole template."
    ' {"enabled": false} pauses it, {"enabled": true} resumes it.',
)
def update_schedule(
    request: HttpRequest, schedule_id: int, payload: SchedulePatch
) -> dict[str, Any]:
    return schedule_out(
        schedules.update_schedule(schedule_id, _values(payload), actor=audit.Actor.of(request))
    )


@router.delete(
    "/schedules/{schedule_id}",
    response={204: None},
    summary="Delete a schedule and its history (the missions it started stay)",
)
def delete_schedule(request: HttpRequest, schedule_id: int) -> Status[None]:
    schedules.delete_schedule(schedule_id, actor=audit.Actor.of(request))
    return Status(204, None)


class HistoryQuery(Schema):
    limit: int = Field(100, ge=1, le=1000)


@router.get(
    "/schedules/{schedule_id}/history",
    response=list[FiringOut],
    summary="A schedule's firings, newest first",
    description="One line per due time: started (with its mission), skipped_overlap,"
    " skipped_catch_up, or failed (with the reason).",
)
def schedule_history(
    request: HttpRequest, schedule_id: int, query: Query[HistoryQuery]
) -> list[ScheduleFiring]:
    return list(schedules.history(schedule_id, limit=query.limit))
