"""Each owner-visible change is one action: whichever interface offers it (the console, the API
with a token, a management command, the admin), the security log gets the same event — its kind
and the fields that say what changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agentos.core import tokens
from agentos.core.models import AuditEvent
from kernel.models import GlobalBudget
from memory import store
from memory.store import Draft
from missions import endpoints, keys
from missions.models import Mission, Project, Schedule
from tests.api.conftest import Api
from tests.approvals.factories import make_approval
from tests.factories import Owner, verified_client
from tools.models import Decision, PermissionRule

pytestmark = pytest.mark.django_db

KEY = "sk-test-0123456789abcdef"
URL = "http://127.0.0.1:8080/v1"


@dataclass
class World:
    owner: Owner
    console: Client
    api: Api
    project: Project
    ids: dict[str, Any] = field(default_factory=dict)  # what a setup made, for the interfaces

    def post(self, url: str, data: dict[str, Any] | None = None) -> None:
        response = self.console.post(url, data or {})
        assert response.status_code in (200, 302), response.content[:500]

    def session_api(self, path: str, body: dict[str, Any] | None = None) -> None:
        """The API from a verified console session (tokens are managed only from one)."""
        response = self.console.post(
            f"/api/v1{path}", json.dumps(body or {}), content_type="application/json"
        )
        assert response.status_code in (200, 201), response.content[:500]

    def call(self, response: Any) -> None:
        assert response.status_code in (200, 201, 202, 204), response.content[:500]


@dataclass(frozen=True)
class Action:
    kind: AuditEvent.Kind
    expected: Callable[[World], dict[str, Any]]  # the fields that say what changed
    interfaces: dict[str, Callable[[World], None]]
    setup: Callable[[World], None] = lambda world: None


def command(*args: str) -> Callable[[World], None]:
    def call(world: World) -> None:
        call_command(*args)

    return call


def _approval(world: World) -> Any:
    mission = Mission.objects.create(project=world.project, goal="Deploy.")
    return make_approval(mission=mission)


def _decide_in_console(world: World) -> None:
    approval = _approval(world)
    world.post(
        f"/approvals/{approval.pk}/",
        {"args_hash": approval.request["args_hash"], "decision": "always"},
    )


def _decide_by_api(world: World) -> None:
    approval = _approval(world)
    secret = tokens.create_token(
        owner=world.owner.user, name="phone", scopes=["read", "act", "approve"]
    ).secret
    phone = Api(world.api.client, secret)
    body = {"approve": True, "always": True, "args_hash": approval.request["args_hash"]}
    world.call(phone.post(f"/approvals/{approval.pk}/decision", body))


def _rule(world: World) -> None:
    rule = PermissionRule.objects.create(
        project=world.project, tool="shell", pattern="make deploy", decision=Decision.ALLOW
    )
    world.ids["rule"] = rule.pk


def _note(world: World) -> None:
    (path,) = store.write(
        "project/7", [Draft("Deploys on Fridays", "y")], author="run:1", message="fact"
    )
    world.ids["path"] = path


def _note_url(world: World, name: str) -> str:
    return reverse(name, kwargs={"scope": "project/7", "path": world.ids["path"]})


def _schedule(world: World) -> None:
    schedule = Schedule.objects.create(
        name="digest", mission={"project_id": world.project.pk, "goal": "Digest."}, cron="0 7 * * *"
    )
    world.ids["schedule"] = schedule.pk


def _budget_row(world: World) -> None:
    world.ids["budget"] = GlobalBudget.objects.create().pk


ACTIONS: dict[str, Action] = {
    "set_provider_key": Action(
        AuditEvent.Kind.PROVIDER_CHANGED,
        lambda world: {"provider": "openai", "change": "key set"},
        {
            "console": lambda world: world.post(
                "/settings/", {"action": "save_key", "provider": "openai", "openai-key": KEY}
            ),
            "api": lambda world: world.call(
                world.api.put("/settings/provider-keys/openai", {"key": KEY})
            ),
        },
    ),
    "forget_provider_key": Action(
        AuditEvent.Kind.PROVIDER_CHANGED,
        lambda world: {"provider": "openai", "change": "key forgotten"},
        {
            "console": lambda world: world.post(
                "/settings/", {"action": "forget_key", "provider": "openai"}
            ),
            "api": lambda world: world.call(world.api.delete("/settings/provider-keys/openai")),
        },
        setup=lambda world: world.ids.update(key=keys.put("openai", KEY).pk),
    ),
    "set_endpoint": Action(
        AuditEvent.Kind.PROVIDER_CHANGED,
        lambda world: {"provider": "compatible", "change": "endpoint set"},
        {
            "console": lambda world: world.post(
                "/settings/",
                {
                    "action": "save_endpoint",
                    "provider": "compatible",
                    "compatible-base_url": URL,
                    "compatible-model": "qwen",
                },
            ),
            "api": lambda world: world.call(
                world.api.put("/settings/compatible-endpoint", {"base_url": URL, "model": "qwen"})
            ),
        },
    ),
    "remove_endpoint": Action(
        AuditEvent.Kind.PROVIDER_CHANGED,
        lambda world: {"provider": "compatible", "change": "endpoint removed"},
        {
            "console": lambda world: world.post(
                "/settings/", {"action": "forget_endpoint", "provider": "compatible"}
            ),
            "api": lambda world: world.call(world.api.delete("/settings/compatible-endpoint")),
        },
        setup=lambda world: world.ids.update(endpoint=endpoints.put(base_url=URL, model="qwen").pk),
    ),
    "set_global_caps": Action(
        AuditEvent.Kind.POLICY_CHANGED,
        lambda world: {"daily_usd_micros": 12_500_000, "max_running_runs": 8},
        {
            "console": lambda world: world.post(
                "/agents/",
                {"action": "budget", "budget-daily_usd": "12.50", "budget-max_running_runs": "8"},
            ),
            "api": lambda world: world.call(
                world.api.patch(
                    "/settings/budget", {"daily_usd_micros": 12_500_000, "max_running_runs": 8}
                )
            ),
            "admin": lambda world: world.post(
                reverse("admin:kernel_globalbudget_change", args=[world.ids["budget"]]),
                {"daily_usd_micros": 12_500_000, "max_running_runs": 8},
            ),
        },
        setup=_budget_row,
    ),
    "add_permission_rule": Action(
        AuditEvent.Kind.RULE_ADDED,
        lambda world: {
            "project": world.project.pk,
            "tool": "shell",
            "pattern": "make deploy",
            "decision": Decision.ALLOW,
        },
        {
            "console": lambda world: world.post(
                "/tools/",
                {
                    "project": world.project.pk,
                    "tool": "shell",
                    "pattern": "make deploy",
                    "decision": Decision.ALLOW,
                    "note": "",
                },
            ),
            "approval in the console": _decide_in_console,
            "approval by the api": _decide_by_api,
            "admin": lambda world: world.post(
                reverse("admin:tools_permissionrule_add"),
                {
                    "project": world.project.pk,
                    "tool": "shell",
                    "pattern": "make deploy",
                    "decision": Decision.ALLOW,
                    "note": "",
                },
            ),
        },
    ),
    "remove_permission_rule": Action(
        AuditEvent.Kind.RULE_REMOVED,
        lambda world: {"rule": world.ids["rule"], "tool": "shell", "pattern": "make deploy"},
        {
            "console": lambda world: world.post(
                reverse("console:tool-rule-delete", args=[world.ids["rule"]])
            ),
            "admin": lambda world: world.post(
                reverse("admin:tools_permissionrule_delete", args=[world.ids["rule"]]),
                {"post": "yes"},
            ),
            "admin bulk action": lambda world: world.post(
                reverse("admin:tools_permissionrule_changelist"),
                {
                    "action": "delete_selected",
                    "_selected_action": [world.ids["rule"]],
                    "post": "yes",
                },
            ),
        },
        setup=_rule,
    ),
    "create_token": Action(
        AuditEvent.Kind.TOKEN_CREATED,
        lambda world: {"name": "deploy script", "scopes": ["read"]},
        {
            "console": lambda world: world.post(
                "/settings/", {"name": "deploy script", "scopes": ["read"], "days": "30"}
            ),
            "api": lambda world: world.session_api(
                "/tokens", {"name": "deploy script", "scopes": ["read"], "days": 30}
            ),
            "command": command(
                "create_api_token", "--name", "deploy script", "--scope", "read", "--days", "30"
            ),
        },
    ),
    "revoke_token": Action(
        AuditEvent.Kind.TOKEN_REVOKED,
        lambda world: {"token": world.ids["token"]},
        {
            "console": lambda world: world.post(
                reverse("console:revoke-token", args=[world.ids["token"]])
            ),
            "api": lambda world: world.session_api(f"/tokens/{world.ids['token']}/revoke"),
        },
        setup=lambda world: world.ids.update(
            token=tokens.create_token(owner=world.owner.user, name="old").token.pk
        ),
    ),
    "engage_kill_switch": Action(
        AuditEvent.Kind.KILL_SWITCH,
        lambda world: {"runs": [], "leases_revoked": 0, "schedules": [world.ids["schedule"]]},
        {
            "console": lambda world: world.post("/stop-everything/", {"confirm": "yes"}),
            "api": lambda world: world.call(world.api.post("/stop-everything", {"confirm": True})),
            "command": command("kill_switch", "--yes"),
        },
        setup=_schedule,
    ),
    # Removing the setup commands: the same action as saving them, without a build to queue.
    "change_environment": Action(
        AuditEvent.Kind.ENVIRONMENT_CHANGED,
        lambda world: {"project": world.project.pk, "change": "removed"},
        {
            "console": lambda world: world.post(
                reverse("console:project-environment", args=[world.project.pk]), {"setup": ""}
            ),
            "api": lambda world: world.call(
                world.api.put(f"/projects/{world.project.pk}/environment", {"setup": ""})
            ),
        },
    ),
    "verify_note": Action(
        AuditEvent.Kind.MEMORY_CHANGED,
        lambda world: {"scope": "project/7", "path": world.ids["path"], "change": "verified"},
        {
            "console": lambda world: world.post(_note_url(world, "console:memory-note-verify")),
            "api": lambda world: world.call(
                world.api.post(
                    "/memory/notes/verify", {"scope": "project/7", "path": world.ids["path"]}
                )
            ),
        },
        setup=_note,
    ),
    "invalidate_note": Action(
        AuditEvent.Kind.MEMORY_CHANGED,
        lambda world: {"scope": "project/7", "path": world.ids["path"], "change": "invalidated"},
        {
            "console": lambda world: world.post(
                _note_url(world, "console:memory-note"), {"reason": "Moved."}
            ),
            "api": lambda world: world.call(
                world.api.post(
                    "/memory/notes/invalidate",
                    {"scope": "project/7", "path": world.ids["path"], "reason": "Moved."},
                )
            ),
        },
        setup=_note,
    ),
}

CASES = [(name, via) for name, action in ACTIONS.items() for via in action.interfaces]


@pytest.fixture
def world(client: Client, owner: Owner) -> World:
    return World(
        owner=owner,
        console=verified_client(owner),
        api=Api(client, tokens.create_token(owner=owner.user, name="tests").secret),
        project=Project.objects.create(name="actions"),
    )


@pytest.mark.parametrize(("name", "via"), CASES, ids=[f"{name}-{via}" for name, via in CASES])
def test_it_records_the_same_event_whichever_interface_acts(
    world: World, name: str, via: str
) -> None:
    action = ACTIONS[name]
    action.setup(world)
    before = AuditEvent.objects.order_by("pk").last()
    since = before.pk if before else 0

    action.interfaces[via](world)

    # The kill switch writes a second event once the sandboxes are stopped: the change is the
    # first one.
    events = [
        event
        for event in AuditEvent.objects.filter(kind=action.kind, pk__gt=since).order_by("pk")
        if event.detail.get("stage") != "sandboxes"
    ]
    assert len(events) == 1, f"{name} through the {via}: {len(events)} {action.kind} events"
    expected = action.expected(world)
    assert {key: events[0].detail.get(key) for key in expected} == expected
