"""The Schedules screen: create with the New mission form's fields, the next five times as the
cron is typed, errors next to their field, pause and resume, delete after a confirmation, and
the history linking each mission started."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from agentos.core import audit
from missions import firing, schedules
from missions.models import Project, Schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def project() -> Project:
    return Project.objects.create(name="notes")


def form(project: Project, **changes: str) -> dict[str, str]:
    return {
        "name": "",
        "cron": "0 7 * * 1-5",
        "timezone": "Europe/Paris",
        "catch_up": "once",
        "project": str(project.pk),
        "goal": "Update the release notes.",
        "checks": "$ make test",
        "risk_class": "research",
        "max_turns": "7",
        **changes,
    }


def test_it_creates_a_schedule_from_the_form(owner_client: Client, project: Project) -> None:
    page = owner_client.get(reverse("console:schedule-new"))
    assert page.status_code == 200
    assert 'name="cron"' in page.content.decode()

    response = owner_client.post(reverse("console:schedule-new"), form(project))

    assert response.status_code == 302
    schedule = Schedule.objects.get()
    assert (schedule.name, schedule.timezone, schedule.catch_up) == (
        "Update the release notes.",
        "Europe/Paris",
        "once",
    )
    assert schedule.mission["project_id"] == project.pk
    assert schedule.mission["risk_class"] == "research"
    assert schedule.mission["caps"]["max_turns"] == 7
    assert schedule.mission["criteria"][0]["oracle"] == {"command": "make test"}
    listing = owner_client.get(reverse("console:schedules")).content.decode()
    assert "Update the release notes." in listing
    assert "Next:" in listing


def test_it_shows_errors_next_to_their_field_and_saves_nothing(
    owner_client: Client, project: Project
) -> None:
    response = owner_client.post(
        reverse("console:schedule-new"), form(project, cron="61 * * * *", goal="")
    )

    content = response.content.decode()
    assert response.status_code == 400
    assert 'id="schedule-error"' in content
    assert "Invalid cron expression" in content
    assert "This field is required." in content  # the goal
    assert not Schedule.objects.exists()


def test_it_previews_the_next_five_times_in_the_time_zone(owner_client: Client) -> None:
    url = reverse("console:schedule-preview")

    good = owner_client.get(url, {"cron": "30 8 * * *", "timezone": "Asia/Tokyo"})
    bad = owner_client.get(url, {"cron": "30 8 * *", "timezone": "Asia/Tokyo"})
    never = owner_client.get(url, {"cron": "0 0 30 2 *", "timezone": "UTC"})

    assert good.content.decode().count("08:30 JST") == 5
    assert "five fields" in bad.content.decode()
    assert "Never" in never.content.decode()


def test_it_pauses_resumes_edits_and_deletes(owner_client: Client, project: Project) -> None:
    schedule = schedules.create_schedule(
        cron="0 7 * * *",
        mission={"project_id": project.pk, "goal": "Digest.", "routes": {}},
        name="digest",
        actor=audit.Actor.command("test"),
    )
    toggle = reverse("console:schedule-toggle", args=[schedule.pk])

    owner_client.post(toggle, {"enabled": "no"})
    paused = Schedule.objects.get().enabled
    owner_client.post(toggle, {"enabled": "yes"})
    edit = reverse("console:schedule-edit", args=[schedule.pk])
    shown = owner_client.get(edit).content.decode()
    saved = owner_client.post(edit, form(project, name="digest", cron="15 6 * * *", goal="x"))
    changed = Schedule.objects.get()
    asked = owner_client.get(reverse("console:schedule-delete", args=[schedule.pk]))
    kept = Schedule.objects.exists()
    owner_client.post(reverse("console:schedule-delete", args=[schedule.pk]), {"confirm": "yes"})

    assert paused is False
    assert 'value="0 7 * * *"' in shown
    assert saved.status_code == 302
    assert (changed.cron, changed.mission["goal"], changed.enabled) == ("15 6 * * *", "x", True)
    assert "Delete the schedule" in asked.content.decode()
    assert kept
    assert not Schedule.objects.exists()


def test_its_history_links_each_mission_started(
    owner_client: Client, project: Project, monkeypatch: pytest.MonkeyPatch, seeded_catalog: None
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")  # the run is created, never executed
    schedule = schedules.create_schedule(
        cron="0 * * * *",
        mission={"project_id": project.pk, "goal": "Digest."},
        actor=audit.Actor.command("test"),
    )
    start = datetime(2026, 12, 1, 7, tzinfo=UTC)
    Schedule.objects.filter(pk=schedule.pk).update(created_at=start)
    (started,) = firing.fire_due(start + timedelta(hours=1))

    page = owner_client.get(reverse("console:schedule", args=[schedule.pk])).content.decode()

    assert reverse("console:mission", args=[started]) in page
    assert "Tue 1 Dec 2026, 08:00 UTC" in page
