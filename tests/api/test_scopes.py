"""The one scope rule (`agentos.core.scopes`): every route a token can reach answers as the table
says, the OpenAPI document and the Settings screen say the same, and a phone's `read` + `approve`
token reads and decides but starts nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from agentos.api import PREFIX, api
from agentos.core import idempotency, scopes, tokens
from agentos.core.models import Scope
from approvals.models import Approval, Question
from kernel.models import Run
from missions.models import Mission
from tests.agentos.test_api import bearer, error_of
from tests.api.factories import make_project
from tests.approvals.factories import make_approval, make_question
from tests.factories import Owner

WRITES = {"post", "put", "patch", "delete"}
# Longer than any key the API takes: a write refused for it never reaches its view.
UNUSABLE_KEY = "k" * (idempotency.MAX_KEY_LENGTH + 1)


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    """(method, route, OpenAPI operation) of every route of /api/v1."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    for path, methods in api.get_openapi_schema()["paths"].items():
        route = "/" + path.removeprefix(PREFIX).strip("/")
        found.extend((method, route, operation) for method, operation in methods.items())
    return found


def token_operations() -> list[tuple[str, str]]:
    """The operations a token may call (the others take a session, or nobody)."""
    return [
        (method, route)
        for method, route, operation in operations()
        if any("OwnerToken" in need for need in operation.get("security", []))
    ]


def concrete(route: str) -> str:
    """A path of the route: every parameter 1 (a number where ids are numbers)."""
    return PREFIX.rstrip("/") + re.sub(r"\{[^}]+\}", "1", route)


def secret_with(owner: Owner, *chosen: Scope) -> str:
    return tokens.create_token(owner=owner.user, name="-".join(chosen), scopes=chosen).secret


def call(client: Client, method: str, route: str, secret: str, **headers: str) -> Any:
    return client.generic(
        method.upper(),
        concrete(route),
        "{}",
        content_type="application/json",
        headers={**bearer(secret), **headers},
    )


def test_each_decision_of_the_table_is_a_route() -> None:
    routes = {(method.upper(), route) for method, route, _ in operations()}

    assert routes >= scopes.DECISIONS, scopes.DECISIONS - routes


def test_the_openapi_document_names_the_scope_of_every_token_route() -> None:
    declared = {
        (method, route): need["OwnerToken"]
        for method, route, operation in operations()
        for need in operation.get("security", [])
        if "OwnerToken" in need
    }

    assert declared[("post", "/approvals/{approval_id}/decision")] == ["approve"]
    assert declared[("post", "/missions")] == ["act"]
    assert declared[("get", "/missions")] == ["read"]
    assert all(
        scopes_named == [scopes.needed(method, route).value]
        for (method, route), scopes_named in declared.items()
    )


@pytest.mark.django_db
def test_every_token_route_refuses_a_token_without_its_scope(client: Client, owner: Owner) -> None:
    secrets = {
        needed: secret_with(owner, *(scope for scope in Scope if scope != needed))
        for needed in Scope
    }
    checked = 0

    for method, route in token_operations():
        needed = scopes.needed(method, route)
        response = call(client, method, route, secrets[needed])

        assert response.status_code == 403, (method, route, response.content)
        assert error_of(response)["code"] == "insufficient_scope"
        assert response["WWW-Authenticate"].endswith(f'scope="{needed.value}"'), (method, route)
        checked += 1

    assert checked >= 60  # the walk found the routes
    assert not Mission.objects.exists()


@pytest.mark.django_db
def test_every_write_lets_a_token_with_its_scope_alone_through(
    client: Client, owner: Owner
) -> None:
    secrets = {scope: secret_with(owner, scope) for scope in Scope}

    for method, route in token_operations():
        if method not in WRITES:
            continue
        needed = scopes.needed(method, route)
        # Past authentication and scope, the over-long key stops it before the view runs.
        response = call(client, method, route, secrets[needed], **{"Idempotency-Key": UNUSABLE_KEY})

        assert response.status_code in (400, 422), (method, route, response.content)
        assert error_of(response)["code"] in ("invalid_idempotency_key", "invalid_input")


@pytest.mark.django_db
def test_a_phone_token_reads_and_decides_but_starts_and_steers_nothing(
    client: Client, owner: Owner
) -> None:
    approval = make_approval()
    question = make_question()
    phone = bearer(secret_with(owner, Scope.READ, Scope.APPROVE))
    run = Run.objects.get(pk=approval.run_id)

    listed = client.get("/api/v1/approvals", headers=phone)
    decided = client.post(
        f"/api/v1/approvals/{approval.pk}/decision",
        {"approve": True, "args_hash": approval.request["args_hash"]},
        content_type="application/json",
        headers=phone,
    )
    answered = client.post(
        f"/api/v1/questions/{question.pk}/answer",
        {"text": "main"},
        content_type="application/json",
        headers=phone,
    )
    started = client.post(
        "/api/v1/missions",
        {"project_id": make_project().pk, "goal": "Delete the backups."},
        content_type="application/json",
        headers=phone,
    )
    paused = client.post(f"/api/v1/runs/{run.pk}/pause", headers=phone)

    assert [item["id"] for item in listed.json()] == [approval.pk]
    assert (decided.status_code, decided.json()["status"]) == (200, "approved")
    assert answered.status_code == 200
    assert Approval.objects.get(pk=approval.pk).status == "approved"
    assert Question.objects.get(pk=question.pk).status == "answered"
    for refused in (started, paused):
        assert refused.status_code == 403
        assert error_of(refused)["message"] == (
            "This API token lacks the 'act' scope (needed to start and steer missions, and "
            "change anything that is not a decision); create a token with it in Settings."
        )
    assert Mission.objects.count() == 2  # the approval's and the question's, nothing started
    assert not Run.objects.get(pk=run.pk).paused


@pytest.mark.django_db
def test_an_act_token_cannot_decide(client: Client, owner: Owner) -> None:
    approval = make_approval()
    script = bearer(secret_with(owner, Scope.READ, Scope.ACT))

    response = client.post(
        f"/api/v1/approvals/{approval.pk}/decision",
        {"approve": True, "args_hash": approval.request["args_hash"]},
        content_type="application/json",
        headers=script,
    )

    assert (response.status_code, error_of(response)["code"]) == (403, "insufficient_scope")
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_the_settings_screen_says_the_rule_of_the_table(owner_client: Client) -> None:
    text = scopes.help_text()

    page = owner_client.get("/settings/")

    assert text.startswith("read: read anything; act: start and steer missions")
    assert "approve: decide approvals, answer questions" in text
    assert "A phone that approves needs read and approve, not act." in text
    assert escape(text) in page.content.decode()
