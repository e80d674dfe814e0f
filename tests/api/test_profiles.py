"""Domain profiles over /api/v1: read and edited through the console's service, chosen by name in
the body of POST /api/v1/missions (and so in schedules' and webhooks' templates)."""

from __future__ import annotations

from typing import Any

import pytest

from agentos.core.models import AuditEvent
from kernel.models import Run
from missions.models import Mission, Profile, Schedule
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.api.factories import make_project

pytestmark = pytest.mark.usefixtures("seeded_profiles")

KNOWN = ["analysis", "automation", "programming", "research"]


@pytest.fixture
def with_key(monkeypatch: pytest.MonkeyPatch, seeded_catalog: None) -> None:
    """A provider key: runs are created (never executed here) on the default routes."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


def test_a_mission_starts_with_a_profile_and_says_so(api: Api, with_key: None) -> None:
    project = make_project()

    response = api.post(
        "/missions",
        {
            "project_id": project.pk,
            "goal": "Summarise the Q3 invoices.",
            "profile": "analysis",
            "caps": {"max_tokens": 90_000},
        },
    )

    assert response.status_code == 201, response.content
    body = response.json()
    analysis = Profile.objects.get(name="analysis")
    mission = Mission.objects.get()
    assert (body["profile"], mission.profile) == ("analysis", analysis)
    assert body["caps"]["max_tokens"] == 90_000
    assert body["caps"]["max_usd_micros"] == analysis.max_usd_micros
    assert [c["description"] for c in body["criteria"]] == analysis.criteria
    assert body["routes"]["executor"]["effort"] == "high"
    run = Run.objects.get(pk=body["run_id"])
    assert run.input["effort"] == "high"  # the key is set: the real route runs
    assert "git_push" not in run.input["tools"]
    assert api.get(f"/missions/{mission.pk}").json()["profile"] == "analysis"
    assert [item["profile"] for item in api.get("/missions").json()["items"]] == ["analysis"]


def test_an_unknown_profile_is_a_422_naming_the_known_ones(api: Api, with_key: None) -> None:
    project = make_project()

    response = api.post(
        "/missions", {"project_id": project.pk, "goal": "x", "profile": "astrology"}
    )

    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid_input"
    assert error["details"]["profiles"] == KNOWN  # type: ignore[index]
    assert error["details"]["fields"] == {  # type: ignore[index]
        "profile": [f"No profile 'astrology'; profiles: {', '.join(KNOWN)}."]
    }
    assert not Mission.objects.exists()


def test_a_schedule_template_with_an_unknown_profile_is_refused(api: Api) -> None:
    project = make_project()
    template = {"project_id": project.pk, "goal": "Report.", "profile": "astrology"}

    response = api.post("/schedules", {"cron": "0 7 * * *", "mission": template})

    assert response.status_code == 422
    fields = error_of(response)["details"]["fields"]  # type: ignore[index]
    assert list(fields) == ["mission.profile"]
    assert not Schedule.objects.exists()
    template["profile"] = "research"
    assert api.post("/schedules", {"cron": "0 7 * * *", "mission": template}).status_code == 201
    assert Schedule.objects.get().mission["profile"] == "research"


def test_it_lists_shows_creates_and_replaces_profiles(api: Api) -> None:
    assert [profile["name"] for profile in api.get("/profiles").json()] == KNOWN
    research = api.get("/profiles/research").json()
    assert research["sandbox_level"] == 1
    assert "web_fetch" in research["tools"]

    ops: dict[str, Any] = {
        "description": "Operations",
        "routes": {"executor": {"effort": "low"}},
        "criteria": ["$ make check", "Each change is logged."],
        "max_seconds": 600,
    }
    created = api.put("/profiles/ops", ops)
    replaced = api.put("/profiles/ops", {**ops, "sandbox_level": 2})

    assert (created.status_code, replaced.status_code) == (201, 200)
    assert replaced.json()["sandbox_level"] == 2
    assert replaced.json()["criteria"] == ops["criteria"]
    assert Profile.objects.get(name="ops").sandbox_level == 2
    events = AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED)
    assert [event.detail["profile"] for event in events] == ["ops", "ops"]


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("research", {"tools": ["teleport"]}, "tools"),
        ("research", {"max_usd_micros": -1}, "max_usd_micros"),
        ("Bad Name", {}, "name"),
    ],
)
def test_a_bad_profile_is_a_422_and_changes_nothing(
    api: Api, name: str, body: dict[str, Any], field: str
) -> None:
    before = api.get("/profiles").json()

    response = api.put(f"/profiles/{name}", body)

    assert response.status_code == 422
    assert field in error_of(response)["details"]["fields"]  # type: ignore[index]
    assert api.get("/profiles").json() == before
    assert api.get("/profiles/nothing").status_code == 404
