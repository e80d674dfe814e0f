"""API tokens expire and carry scopes: read (GET), approve (owner decisions), act (other writes)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agentos.core import tokens
from agentos.core.errors import DomainError
from agentos.core.models import ApiToken, AuditEvent
from missions.models import Project, ProviderKey
from tests.agentos.test_api import bearer, error_of
from tests.factories import Owner


def test_a_new_token_reads_and_acts_for_90_days(owner: Owner) -> None:
    new = tokens.create_token(owner=owner.user, name="script")

    assert new.token.scopes == ["read", "act"]
    expected = timezone.now() + timedelta(days=90)
    assert abs(new.token.expires_at - expected) < timedelta(minutes=1)


def test_it_takes_approve_only_when_asked_and_a_chosen_lifetime(owner: Owner) -> None:
    new = tokens.create_token(
        owner=owner.user, name="phone", scopes=["approve", "read", "approve"], days=7
    )

    assert new.token.scopes == ["read", "approve"]
    assert new.token.expires_at.date() == (timezone.now() + timedelta(days=7)).date()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scopes": []}, "at least one scope"),
        ({"scopes": ["admin"]}, "Unknown scope 'admin'"),
        ({"days": 0}, "between 1 and 365 days"),
        ({"days": 366}, "between 1 and 365 days"),
    ],
)
def test_it_refuses_a_bad_scope_or_lifetime(
    owner: Owner, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(DomainError, match=message):
        tokens.create_token(owner=owner.user, name="x", **kwargs)  # type: ignore[arg-type]
    assert not ApiToken.objects.exists()


def test_it_refuses_an_expired_token_with_a_clear_message(client: Client, owner: Owner) -> None:
    new = tokens.create_token(owner=owner.user, name="cron", days=30)
    expired_on = new.token.expires_at.date().isoformat()

    with time_machine.travel(new.token.expires_at + timedelta(seconds=1)):
        response = client.get("/api/v1/me", headers=bearer(new.secret))

    assert response.status_code == 401
    assert error_of(response) == {
        "code": "token_expired",
        "message": f"This API token expired on {expired_on}; create a new one in Settings.",
        "details": None,
    }
    refusal = AuditEvent.objects.get(kind=AuditEvent.Kind.TOKEN_REFUSED)
    assert refusal.detail["reason"] == "expired"


def test_reading_needs_the_read_scope(client: Client, owner: Owner) -> None:
    secret = tokens.create_token(owner=owner.user, name="writer", scopes=["act"]).secret

    response = client.get("/api/v1/projects", headers=bearer(secret))

    assert response.status_code == 403
    assert error_of(response) == {
        "code": "insufficient_scope",
        "message": "This API token lacks the 'read' scope (needed to read anything); create a "
        "token with it in Settings.",
        "details": None,
    }
    refusal = AuditEvent.objects.get(kind=AuditEvent.Kind.TOKEN_REFUSED)
    assert (refusal.detail["reason"], refusal.detail["scope"]) == ("missing_scope", "read")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/v1/projects", {"name": "x"}),
        ("PUT", "/api/v1/settings/provider-keys/openai", {"key": "sk-0123456789"}),
        ("PATCH", "/api/v1/settings/budget", {"max_usd_per_day": 5}),
        ("DELETE", "/api/v1/settings/provider-keys/openai", {}),
    ],
)
def test_changing_anything_needs_the_act_scope(
    client: Client, owner: Owner, method: str, path: str, body: dict[str, object]
) -> None:
    secret = tokens.create_token(owner=owner.user, name="reader", scopes=["read"]).secret

    response = client.generic(
        method, path, json.dumps(body), content_type="application/json", headers=bearer(secret)
    )

    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_scope"
    assert "'act' scope" in str(error_of(response)["message"])
    assert not Project.objects.exists()
    assert not ProviderKey.objects.exists()


def test_a_read_and_act_token_reads_and_writes(client: Client, owner: Owner) -> None:
    secret = tokens.create_token(owner=owner.user, name="script").secret

    created = client.post(
        "/api/v1/projects", {"name": "x"}, content_type="application/json", headers=bearer(secret)
    )

    assert created.status_code == 201
    assert client.get("/api/v1/projects", headers=bearer(secret)).status_code == 200


def test_the_api_creates_tokens_with_scopes_and_expiry(owner_client: Client) -> None:
    response = owner_client.post(
        "/api/v1/tokens",
        {"name": "phone", "scopes": ["read", "approve"], "days": 30},
        content_type="application/json",
    )

    assert response.status_code == 201
    body = response.json()
    assert body["scopes"] == ["read", "approve"]
    assert body["expires_at"].startswith((timezone.now() + timedelta(days=30)).date().isoformat())
    listed = owner_client.get("/api/v1/tokens").json()
    assert (listed[0]["scopes"], listed[0]["expires_at"]) == (body["scopes"], body["expires_at"])


def test_reset_owner_revokes_every_token(client: Client, owner: Owner) -> None:
    secrets = [tokens.create_token(owner=owner.user, name=name).secret for name in ("a", "b")]
    out = StringIO()

    call_command("reset_owner", stdout=out)

    assert not ApiToken.objects.filter(revoked_at__isnull=True).exists()
    for secret in secrets:
        response = client.get("/api/v1/me", headers=bearer(secret))
        assert (response.status_code, error_of(response)["code"]) == (401, "invalid_token")
    assert "2 API tokens revoked" in out.getvalue()
    reset = AuditEvent.objects.get(kind=AuditEvent.Kind.OWNER_RESET)
    assert reset.detail["tokens_revoked"] == 2


def test_create_api_token_command_takes_scopes_and_lifetime(owner: Owner) -> None:
    out, err = StringIO(), StringIO()

    call_command(
        "create_api_token",
        "--name",
        "phone",
        "--scope",
        "read",
        "--scope",
        "approve",
        "--days",
        "7",
        stdout=out,
        stderr=err,
    )

    token = ApiToken.objects.get()
    assert token.scopes == ["read", "approve"]
    assert token.expires_at.date() == (timezone.now() + timedelta(days=7)).date()
    assert "expires" in err.getvalue()
