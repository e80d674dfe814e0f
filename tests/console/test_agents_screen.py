"""The Agents & policies screen: each role's model and effort, the global budget, and the
permission rules in summary — changed here, validated, audited, and used by the next run."""

from __future__ import annotations

import pytest
from django.test import Client

from agentos.core.models import AuditEvent
from kernel.models import GlobalBudget
from missions import routing
from missions.models import Role, RoleRoute
from tests.kernel.factories import make_mission
from tools.models import Decision, PermissionRule

pytestmark = pytest.mark.django_db


def test_it_shows_each_roles_route_and_whether_it_can_run(
    owner_client: Client, seeded_catalog: None
) -> None:
    content = owner_client.get("/agents/").content.decode()

    executor = RoleRoute.objects.get(role=Role.EXECUTOR)
    assert f"<code>{executor.provider}/{executor.model}</code>" in content
    assert "no key: the offline model stands in" in content  # no provider key in the tests


def test_it_routes_a_role_to_another_model_for_the_next_runs(
    owner_client: Client, seeded_catalog: None
) -> None:
    response = owner_client.post(
        "/agents/",
        {
            "action": "route",
            "route-role": "executor",
            "route-model": "scripted/scripted",
            "route-effort": "low",
        },
    )

    assert response.status_code == 302
    route = RoleRoute.objects.get(role=Role.EXECUTOR)
    assert (route.provider, route.model, route.effort) == ("scripted", "scripted", "low")
    assert routing.route_for(make_mission(), "executor").provider == "scripted"
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.POLICY_CHANGED)
    assert (event.detail["role"], event.detail["model"]) == ("executor", "scripted")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"route-role": "executor", "route-model": "nowhere/none"}, "Select a valid choice"),
        ({"route-role": "janitor", "route-model": "scripted/scripted"}, "Select a valid choice"),
        (
            {"route-role": "executor", "route-model": "scripted/scripted", "route-effort": "max"},
            "Select a valid choice",
        ),
    ],
)
def test_it_refuses_a_bad_route_and_changes_nothing(
    owner_client: Client, seeded_catalog: None, data: dict[str, str], message: str
) -> None:
    before = list(RoleRoute.objects.values_list("role", "provider", "model", "effort"))

    response = owner_client.post("/agents/", {"action": "route", **data})

    assert response.status_code == 400
    assert message in response.content.decode()
    assert list(RoleRoute.objects.values_list("role", "provider", "model", "effort")) == before
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).exists()


def test_it_sets_the_global_budget(owner_client: Client) -> None:
    response = owner_client.post(
        "/agents/",
        {"action": "budget", "budget-daily_usd": "12.50", "budget-max_running_runs": "8"},
    )
    cleared = owner_client.post(
        "/agents/", {"action": "budget", "budget-daily_usd": "", "budget-max_running_runs": "8"}
    )
    refused = owner_client.post(
        "/agents/", {"action": "budget", "budget-daily_usd": "-1", "budget-max_running_runs": "x"}
    )

    assert (response.status_code, cleared.status_code, refused.status_code) == (302, 302, 400)
    budget = GlobalBudget.objects.get()
    assert (budget.daily_usd_micros, budget.max_running_runs) == (None, 8)
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).count() == 2
    first = AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).order_by("pk").first()
    assert first is not None
    assert first.detail["daily_usd_micros"] == 12_500_000


def test_it_counts_the_permission_rules_and_leads_to_the_tools(owner_client: Client) -> None:
    PermissionRule.objects.create(tool="shell", pattern="rm *", decision=Decision.DENY)

    content = owner_client.get("/agents/").content.decode()

    assert "Deny: 1" in content
    assert 'href="/tools/"' in content


def test_an_unknown_action_is_refused(owner_client: Client) -> None:
    assert owner_client.post("/agents/", {"action": "everything"}).status_code == 400


def test_it_shows_and_sets_a_missions_default_caps(owner_client: Client) -> None:
    shown = owner_client.get("/agents/").content.decode()
    assert 'name="budget-mission_usd" value="5"' in shown
    assert 'name="budget-mission_tokens" value="2000000"' in shown
    assert 'name="budget-mission_minutes" value="240"' in shown

    response = owner_client.post(
        "/agents/",
        {
            "action": "budget",
            "budget-daily_usd": "20",
            "budget-max_running_runs": "64",
            "budget-mission_usd": "2.50",
            "budget-mission_tokens": "",  # the owner's "no cap"
            "budget-mission_minutes": "30",
        },
    )

    assert response.status_code == 302
    budget = GlobalBudget.objects.get()
    assert (budget.mission_usd_micros, budget.mission_tokens, budget.mission_seconds) == (
        2_500_000,
        None,
        1800,
    )
    logged = AuditEvent.objects.get(kind=AuditEvent.Kind.POLICY_CHANGED)
    assert (logged.detail["mission_usd_micros"], logged.detail["mission_tokens"]) == (
        2_500_000,
        None,
    )
