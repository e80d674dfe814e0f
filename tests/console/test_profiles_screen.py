"""Profiles on the console: edited and added on Agents & policies (checked by the service, in the
security log), chosen on the New mission form."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agentos.core.models import AuditEvent
from kernel import budgets
from kernel.models import Run
from missions.models import Mission, Profile, Webhook
from tests.console.factories import project

pytestmark = pytest.mark.usefixtures("seeded_catalog", "seeded_profiles")


def edit(name: str, **changes: str) -> dict[str, str]:
    """The research profile's form as the screen fills it, with `changes`."""
    fields = {
        "name": name,
        "description": "Answers with sources.",
        "sandbox_level": "1",
        "routes": "executor: high\nplanner: anthropic/claude-opus-5-5 medium",
        "tools": "read_file list_files\nshell",
        "mcp_servers": "",
        "skills": "",
        "criteria": "Each claim cites its source.\n\n$ make check",
        "max_usd": "2.50",
        "max_tokens": "",
        "max_minutes": "30",
        **changes,
    }
    return {
        "action": "profile",
        "profile": name,
        **{f"profile-{name}-{key}": value for key, value in fields.items()},
    }


def test_it_lists_each_profile_with_its_form(owner_client: Client) -> None:
    content = owner_client.get("/agents/").content.decode()

    for name in ("analysis", "automation", "programming", "research"):
        assert f'data-profile="{name}"' in content
        assert f'name="profile-{name}-criteria"' in content
    assert 'name="profile-new-name"' in content
    assert "executor: high" in content  # the research profile's routes, as lines


def test_it_changes_a_profile_and_logs_it(owner_client: Client) -> None:
    response = owner_client.post("/agents/", edit("research"))

    assert response.status_code == 302
    research = Profile.objects.get(name="research")
    assert research.routes == {
        "executor": {"effort": "high"},
        "planner": {"provider": "anthropic", "model": "claude-opus-5-5", "effort": "medium"},
    }
    assert research.tools == ["read_file", "list_files", "shell"]
    assert research.criteria == ["Each claim cites its source.", "$ make check"]
    assert (research.max_usd_micros, research.max_tokens, research.max_seconds) == (
        2_500_000,
        None,
        1800,
    )
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.POLICY_CHANGED)
    assert event.detail["profile"] == "research"
    assert event.detail["path"] == "/agents/"


@pytest.mark.parametrize(
    ("changes", "field", "said"),
    [
        ({"tools": "read_file teleport"}, "tools", "No tool named teleport"),
        ({"routes": "executor"}, "routes", "executor: write role: provider/model [effort]"),
        ({"routes": "pilot: high"}, "routes", "Unknown role 'pilot'"),
        ({"sandbox_level": "3"}, "sandbox_level", "Select a valid choice."),
        ({"max_minutes": "0"}, "max_minutes", "greater than or equal to 1"),
    ],
)
def test_it_refuses_a_bad_profile_next_to_the_field_and_changes_nothing(
    owner_client: Client, changes: dict[str, str], field: str, said: str
) -> None:
    before = Profile.objects.get(name="research").updated_at

    response = owner_client.post("/agents/", edit("research", **changes))

    assert response.status_code == 400
    form = next(
        row["form"] for row in response.context["profiles"] if row["profile"].name == "research"
    )
    assert said in " ".join(str(error) for error in form.errors[field])
    assert response.content.decode().count("<details open>") == 1  # its form, open on the error
    assert Profile.objects.get(name="research").updated_at == before
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).exists()


def test_it_adds_a_profile_and_refuses_a_taken_name(owner_client: Client) -> None:
    new = {key.replace("profile-ops-", "profile-new-"): value for key, value in edit("ops").items()}
    new["profile"] = ""

    assert owner_client.post("/agents/", new).status_code == 302
    taken = owner_client.post("/agents/", {**new, "profile-new-name": "research"})

    assert Profile.objects.get(name="ops").criteria == [
        "Each claim cites its source.",
        "$ make check",
    ]
    assert taken.status_code == 400
    assert "A profile named research exists already." in taken.content.decode()


def test_the_new_mission_form_starts_a_mission_with_a_profile(
    owner_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")  # the run is created, never executed
    defaults = budgets.mission_defaults()
    form: dict[str, Any] = {
        "project": project().pk,
        "goal": "Fix the parser",
        "executor": "openai/gpt-6.1-sol",
        "profile": "programming",
        # The owner's defaults, as the form shows them: the profile's caps apply instead.
        "max_tokens": str(defaults["max_tokens"]),
        "max_minutes": "" if defaults["max_seconds"] is None else defaults["max_seconds"] // 60,
        "max_usd": "0.75",  # changed: the owner's
    }

    page = owner_client.get("/missions/new/").content.decode()
    response = owner_client.post("/missions/new/", form)

    assert '<option value="programming">programming — ' in page
    assert response.status_code == 302, response.content.decode()
    programming = Profile.objects.get(name="programming")
    mission = Mission.objects.get()
    assert mission.profile == programming
    assert (mission.max_tokens, mission.max_seconds, mission.max_usd_micros) == (
        programming.max_tokens,
        programming.max_seconds,
        750_000,
    )
    assert [c["description"] for c in mission.criteria] == programming.criteria
    assert mission.routes["executor"]["model"] == "gpt-6.1-sol"
    assert Run.objects.get(account=mission).input["criteria"] == mission.criteria
    page = owner_client.get(response["Location"]).content.decode()
    assert '<dd id="mission-profile">programming</dd>' in page


def test_the_new_mission_form_refuses_a_profile_for_an_offline_mission(
    owner_client: Client,
) -> None:
    response = owner_client.post(
        "/missions/new/",
        {"project": project().pk, "offline": "survey", "profile": "research"},
    )

    assert response.status_code == 400
    assert "An offline mission has its own model and checks: choose no profile." in (
        response.content.decode()
    )
    assert not Mission.objects.exists()


def test_the_admin_shows_profiles_and_outcomes_and_edits_neither_profile(
    owner_client: Client,
) -> None:
    research = Profile.objects.get(name="research")

    listing = owner_client.get("/admin/missions/profile/")
    change = owner_client.post(
        f"/admin/missions/profile/{research.pk}/change/", {"name": "research", "tools": "[]"}
    )

    assert listing.status_code == 200
    assert "research" in listing.content.decode()
    assert change.status_code == 403
    assert Profile.objects.get(name="research").tools == research.tools
    assert owner_client.get("/admin/missions/evaloutcome/").status_code == 200


def test_a_webhook_made_on_the_console_keeps_its_profile_in_its_template(
    owner_client: Client,
) -> None:
    form = {
        "name": "deploys",
        "preset": "agentos",
        "project": project().pk,
        "goal": "Check the deployment.",
        "risk_class": "code",
        "profile": "automation",
    }

    assert owner_client.post("/webhooks/", form).status_code == 200
    assert Webhook.objects.get().mission["profile"] == "automation"
