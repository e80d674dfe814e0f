"""There is one owner: the API opens to their token only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentos.core import tokens
from agentos.core.models import ApiToken, AuditEvent
from missions.models import Project
from tests.agentos.test_api import bearer, error_of
from tests.factories import Owner


@pytest.mark.parametrize("superuser", [False, True])
def test_it_refuses_the_token_of_another_account(
    client: Client, owner: Owner, superuser: bool
) -> None:
    other = User.objects.create_user("someone-else", is_superuser=superuser)
    secret = tokens.create_token(owner=other, name="theirs").secret

    read = client.get("/api/v1/projects", headers=bearer(secret))
    write = client.post(
        "/api/v1/projects", {"name": "x"}, content_type="application/json", headers=bearer(secret)
    )

    for response in (read, write):
        assert (response.status_code, error_of(response)["code"]) == (401, "invalid_token")
    assert not Project.objects.exists()
    refusal = AuditEvent.objects.filter(kind=AuditEvent.Kind.TOKEN_REFUSED).first()
    assert refusal is not None
    assert refusal.detail["reason"] == "not_owner"
    assert ApiToken.objects.get(owner=other).last_used_at is None


def test_it_refuses_the_token_of_a_deactivated_owner(client: Client, owner: Owner) -> None:
    secret = tokens.create_token(owner=owner.user, name="mine").secret
    User.objects.filter(pk=owner.user.pk).update(is_active=False)

    response = client.get("/api/v1/projects", headers=bearer(secret))

    assert (response.status_code, error_of(response)["code"]) == (401, "invalid_token")


def test_the_owners_token_opens_the_api(client: Client, owner: Owner) -> None:
    secret = tokens.create_token(owner=owner.user, name="mine").secret

    assert client.get("/api/v1/projects", headers=bearer(secret)).status_code == 200
