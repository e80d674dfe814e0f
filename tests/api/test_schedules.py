"""Schedules over /api/v1: a cron expression in a time zone, a mission template, a catch-up
policy, pause and resume, and the history of the firings."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from agentos.core.models import AuditEvent
from missions import firing
from missions.models import Schedule, ScheduleFiring
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.api.factories import make_project

GOAL = "Update the release notes.\nKeep them short."
TEMPLATE = {"goal": GOAL, "risk_class": "research", "caps": {"max_turns": 5}}


def body(project_id: int, **changes: Any) -> dict[str, Any]:
    return {
        "cron": "0 7 * * 1-5",
        "timezone": "Europe/Paris",
        "mission": {"project_id": project_id, **TEMPLATE},
        **changes,
    }


def test_it_creates_reads_changes_and_deletes_a_schedule(api: Api) -> None:
    project = make_project()

    created = api.post("/schedules", body(project.pk, catch_up="once"))
    schedule_id = created.json()["id"]
    read = api.get(f"/schedules/{schedule_id}")
    paused = api.patch(f"/schedules/{schedule_id}", {"enabled": False, "cron": "30 6 * * *"})
    listed = api.get("/schedules").json()
    deleted = api.delete(f"/schedules/{schedule_id}")

    assert created.status_code == 201
    out = created.json()
    assert out["name"] == "Update the release notes."  # the goal's first line
    assert out["mission"] == {"project_id": project.pk, **TEMPLATE}  # as given, no defaults
    assert (out["timezone"], out["catch_up"], out["allow_overlap"]) == (
        "Europe/Paris",
        "once",
        False,
    )
    times = [datetime.fromisoformat(t) for t in out["next_times"]]
    assert len(times) == 5
    assert times == sorted(times)
    for moment in times:  # 07:00 on a weekday, Paris time, whatever the offset of the day
        assert (moment.hour, moment.minute, moment.isoweekday() <= 5) == (7, 0, True)
        assert moment.utcoffset() in {
            datetime.fromisoformat("2026-01-01T00:00+01:00").utcoffset(),
            datetime.fromisoformat("2026-07-01T00:00+02:00").utcoffset(),
        }
    assert read.json() == out
    assert paused.status_code == 200
    assert (paused.json()["enabled"], paused.json()["cron"]) == (False, "30 6 * * *")
    assert paused.json()["next_times"] == []  # paused: nothing comes
    assert paused.json()["name"] == out["name"]
    assert [s["id"] for s in listed] == [schedule_id]
    assert deleted.status_code == 204
    assert not Schedule.objects.exists()
    logged = AuditEvent.objects.filter(kind=AuditEvent.Kind.SCHEDULE_CHANGED).order_by("pk")
    assert [e.detail["change"] for e in logged] == [
        "created",
        "changed: cron, enabled",
        "deleted",
    ]
    assert {e.detail["schedule"] for e in logged} == {schedule_id}


def test_it_defaults_the_time_zone_and_says_never(api: Api) -> None:
    created = api.post("/schedules", {**body(make_project().pk, cron="0 0 30 2 *"), "timezone": ""})

    assert created.status_code == 201
    assert created.json()["timezone"] == "UTC"
    assert created.json()["next_times"] == []  # 30 February never comes


@pytest.mark.parametrize(
    ("changes", "field", "said"),
    [
        ({"cron": "every monday"}, "cron", "five fields"),
        ({"cron": "*/0 * * * *"}, "cron", "Invalid cron expression"),
        ({"cron": "0 7 * * 1,x"}, "cron", "x is not a valid input"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone 'Mars/Olympus'"),
        ({"mission": {"project_id": 999999, "goal": "x"}}, "mission.project_id", "No project"),
        (
            {"mission": {"project_id": 0, "goal": "x", "mcp_servers": ["nowhere"]}},
            "mission.mcp_servers",
            "No MCP server named 'nowhere'",
        ),
    ],
)
def test_it_refuses_a_bad_field_by_name_and_changes_nothing(
    api: Api, changes: dict[str, Any], field: str, said: str
) -> None:
    project = make_project()
    if "mission" in changes and changes["mission"]["project_id"] == 0:
        changes = {"mission": {**changes["mission"], "project_id": project.pk}}
    existing = api.post("/schedules", body(project.pk)).json()

    created = api.post("/schedules", body(project.pk, **changes))
    changed = api.patch(f"/schedules/{existing['id']}", changes)

    for response in (created, changed):
        assert response.status_code == 422
        error = error_of(response)
        assert set(error["details"]["fields"]) == {field}  # type: ignore[index]
        assert said in error["details"]["fields"][field][0]  # type: ignore[index]
        assert said in str(error["message"])
    assert Schedule.objects.count() == 1
    assert api.get("/schedules").json() == [existing]


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"catch_up": "sometimes"}, "catch_up"),
        ({"mission": {"goal": "no project"}}, "project_id"),
        ({"mission": {"project_id": 1, "goal": "x", "risk_class": "wild"}}, "risk_class"),
        ({"mission": {"project_id": 1}}, "mission"),  # no goal, no offline mission
        ({"enabled": "no"}, "enabled"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_it_refuses_what_the_schema_forbids(api: Api, changes: dict[str, Any], where: str) -> None:
    project = make_project()
    existing = api.post("/schedules", body(project.pk)).json()

    created = api.post("/schedules", body(project.pk, **changes))
    changed = api.patch(f"/schedules/{existing['id']}", changes)

    for response in (created, changed):
        assert response.status_code == 422
        places = [".".join(map(str, problem["loc"])) for problem in error_of(response)["details"]]  # type: ignore[attr-defined]
        assert any(where in place for place in places), places
    assert api.get("/schedules").json() == [existing]


def test_it_answers_404_for_an_unknown_schedule(api: Api, db: None) -> None:
    for response in (
        api.get("/schedules/999999"),
        api.patch("/schedules/999999", {"enabled": False}),
        api.delete("/schedules/999999"),
        api.get("/schedules/999999/history"),
    ):
        assert response.status_code == 404
        assert error_of(response)["message"] == "No schedule 999999."


def test_its_history_shows_each_firing_with_its_mission(
    api: Api, seeded_catalog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")  # the run is created, never executed
    project = make_project()
    schedule_id = api.post("/schedules", body(project.pk, cron="* * * * *")).json()["id"]
    Schedule.objects.filter(pk=schedule_id).update(
        created_at=datetime.fromisoformat("2026-12-01T06:59:00+00:00")
    )

    firing.fire_due(datetime.fromisoformat("2026-12-01T07:00:10+00:00"))
    history = api.get(f"/schedules/{schedule_id}/history")

    assert history.status_code == 200
    (line,) = history.json()
    started = ScheduleFiring.objects.get()
    assert line == {
        "id": started.pk,
        "due_at": "2026-12-01T07:00:00Z",
        "fired_at": line["fired_at"],
        "outcome": "started",
        "mission_id": started.mission_id,
        "error": "",
    }
    assert started.mission is not None
    assert (started.mission.goal, started.mission.risk_class) == (GOAL, "research")
    assert started.mission.max_turns == 5
