"""Caps are on from the first start: a mission that sets none of its own gets the owner's
defaults (spend, tokens, wall time), copied in when it is created; the owner changes them or
says "no cap", and Home says which are in force."""

from __future__ import annotations

import pytest
from django.test import Client

from agentos.core import audit
from agentos.core.models import AuditEvent
from kernel import budgets
from kernel.models import GlobalBudget, Run
from missions.launch import create_mission
from missions.models import Mission, Project

pytestmark = pytest.mark.django_db

SCRIPTED = {"executor": {"provider": "scripted", "model": "scripted"}}


def launch(**caps: int | None) -> tuple[Mission, Run]:
    return create_mission(
        project=Project.objects.get_or_create(name="p")[0],
        goal="Say done.",
        routes=SCRIPTED,
        caps=caps,
        trigger="api",
        script={"turns": [{"text": "Done."}]},
    )


def test_a_fresh_install_has_caps_on() -> None:
    assert not GlobalBudget.objects.exists()
    assert budgets.global_caps()["daily_usd_micros"] == 20_000_000
    assert budgets.mission_defaults() == {
        "max_usd_micros": 5_000_000,
        "max_tokens": 2_000_000,
        "max_seconds": 4 * 3600,
    }


def test_a_mission_without_caps_gets_the_defaults() -> None:
    mission, run = launch()

    assert (mission.max_usd_micros, mission.max_tokens, mission.max_seconds) == (
        5_000_000,
        2_000_000,
        14_400,
    )
    assert run.max_seconds == 14_400
    assert mission.is_capped  # its debits are checked against its caps


def test_a_missions_own_caps_and_its_no_cap_win_over_the_defaults() -> None:
    mission, _run = launch(max_usd_micros=1_000_000, max_tokens=None)

    assert (mission.max_usd_micros, mission.max_tokens, mission.max_seconds) == (
        1_000_000,
        None,
        14_400,
    )


def test_the_owners_new_defaults_apply_to_new_missions_only() -> None:
    before, _ = launch()

    budgets.set_global_caps(
        {"mission_usd_micros": 9_000_000, "mission_seconds": None},
        actor=audit.Actor.command("test"),
    )
    after, run = launch()

    assert (after.max_usd_micros, after.max_seconds, run.max_seconds) == (9_000_000, None, None)
    before.refresh_from_db()
    assert (before.max_usd_micros, before.max_seconds) == (5_000_000, 14_400)


def test_home_says_the_caps_in_force_and_where_to_change_them(owner_client: Client) -> None:
    content = " ".join(owner_client.get("/").content.decode().split())
    assert (
        "Caps: a mission $5.00, 2,000,000 tokens, 4 h of wall time · all missions $20.00 a day"
        " · each provider $15.00 a day, $150.00 a month"
    ) in content
    assert 'href="/agents/#budget-title"' in content

    budgets.set_global_caps(
        {"daily_usd_micros": None, "mission_seconds": 5400}, actor=audit.Actor.command("test")
    )
    budgets.set_provider_caps("openai", day=None, month=None, actor=audit.Actor.command("test"))

    content = " ".join(owner_client.get("/").content.decode().split())
    assert "90 min of wall time · all missions none a day" in content
    assert "openai none a day, none a month" in content


def test_the_owner_caps_a_provider_on_the_agents_screen(owner_client: Client) -> None:
    page = owner_client.get("/agents/").content.decode()
    assert "each provider not named" in page

    response = owner_client.post(
        "/agents/",
        {"action": "provider_caps", "provider-provider": "anthropic", "provider-day_usd": "2.5"},
    )
    refused = owner_client.post(
        "/agents/",
        {"action": "provider_caps", "provider-provider": "anthropic", "provider-day_usd": "-1"},
    )

    assert response.status_code == 302
    assert budgets.provider_caps()["anthropic"] == {"day": 2_500_000, "month": None}
    assert refused.status_code == 400
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).count() == 1


def test_the_new_mission_form_shows_the_defaults(owner_client: Client) -> None:
    Project.objects.create(name="p")
    content = owner_client.get("/missions/new/").content.decode()

    assert 'name="max_usd" value="5"' in content
    assert 'name="max_tokens" value="2000000"' in content
    assert 'name="max_minutes" value="240"' in content
