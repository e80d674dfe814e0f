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
from agentos.core.models import ApiToken, AuditEvent
from kernel import heartbeats
from tests.factories import Owner


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def error_of(response: object) -> dict[str, object]:
    body = json.loads(response.content)  # type: ignore[attr-defined]
    assert set(body) == {"error"}
    return body["error"]  # type: ignore[no-any-return]


def test_it_serves_the_openapi_schema(client: Client) -> None:
    response = client.get("/api/v1/openapi.json")

    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.1")
    assert "/api/v1/health" in schema["paths"]


def test_it_reports_health_without_authentication(client: Client, db: None) -> None:
    heartbeats.record_beat(worker="test:1", started=True)

    response = client.get("/api/v1/health")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["state"] == "up"
    assert body["migrations"]["state"] == "applied"
    assert body["workers"]["state"] == "up"
    assert body["workers"]["since"] is not None


def test_it_reports_workers_unknown_before_any_beat(client: Client, db: None) -> None:
    response = client.get("/api/v1/health")

    assert response.status_code == 503
    assert response.json()["status"] == "degraded"
    assert response.json()["workers"] == {
        "state": "unknown",
        "detail": "no worker has reported yet",
        "since": None,
    }


def test_it_reports_workers_stale_when_beats_stop(client: Client, db: None) -> None:
    heartbeats.record_beat(worker="test:1")

    with time_machine.travel(timezone.now() + timedelta(minutes=10)):
        response = client.get("/api/v1/health")

    assert response.status_code == 503
    assert response.json()["workers"]["state"] == "stale"


def test_it_accepts_an_api_token_and_records_its_use(client: Client, owner: Owner) -> None:
    new = tokens.create_token(owner=owner.user, name="backup script")

    response = client.get("/api/v1/me", headers=bearer(new.secret))

    assert response.status_code == 200
    assert response.json() == {"username": "owner", "via": "token", "token_name": "backup script"}
    new.token.refresh_from_db()
    assert new.token.last_used_at is not None


def test_it_refuses_a_revoked_token(client: Client, owner: Owner) -> None:
    new = tokens.create_token(owner=owner.user, name="old script")
    tokens.revoke_token(owner=owner.user, token_id=new.token.pk)

    response = client.get("/api/v1/me", headers=bearer(new.secret))

    assert response.status_code == 401
    assert error_of(response) == {
        "code": "invalid_token",
        "message": "This API token was revoked.",
        "details": None,
    }
    event = AuditEvent.objects.filter(kind=AuditEvent.Kind.TOKEN_REFUSED).get()
    assert event.detail["reason"] == "revoked"


@pytest.mark.parametrize("header", ["Bearer aos_not-a-real-token", "Bearer ", "Basic dXNlcjpwYXNz"])
def test_it_refuses_bad_credentials(client: Client, db: None, header: str) -> None:
    response = client.get("/api/v1/me", headers={"Authorization": header})

    assert response.status_code == 401
    assert error_of(response)["code"] in {"invalid_token", "unauthenticated"}


def test_it_never_stores_the_token_itself(owner: Owner) -> None:
    new = tokens.create_token(owner=owner.user, name="script")

    stored = ApiToken.objects.values().get(pk=new.token.pk)

    assert new.secret not in json.dumps(stored, default=str)
    assert new.secret not in json.dumps(list(AuditEvent.objects.values("detail")), default=str)


def test_it_accepts_a_verified_session(owner_client: Client) -> None:
    response = owner_client.get("/api/v1/me")

    assert response.status_code == 200
    assert response.json()["via"] == "session"


def test_it_refuses_a_session_without_second_factor(client: Client, owner: Owner) -> None:
    client.force_login(owner.user)

    response = client.get("/api/v1/me")

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"


def test_it_checks_csrf_on_session_writes(owner: Owner) -> None:
    from tests.factories import verified_client

    client = verified_client(owner, Client(enforce_csrf_checks=True))

    response = client.post(
        "/api/v1/tokens", json.dumps({"name": "x"}), content_type="application/json"
    )

    assert response.status_code == 403
    assert error_of(response)["code"] == "csrf_failed"
    assert not ApiToken.objects.exists()


def test_it_creates_a_token_once_and_revokes_it(owner_client: Client) -> None:
    created = owner_client.post(
        "/api/v1/tokens", {"name": "deploy"}, content_type="application/json"
    )
    assert created.status_code == 201
    secret = created.json()["token"]
    assert secret.startswith("aos_")
    listed = owner_client.get("/api/v1/tokens").json()
    assert "token" not in listed[0]

    revoked = owner_client.post(f"/api/v1/tokens/{created.json()['id']}/revoke")

    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert Client().get("/api/v1/me", headers=bearer(secret)).status_code == 401


def test_it_does_not_let_a_token_mint_tokens(client: Client, owner: Owner) -> None:
    new = tokens.create_token(owner=owner.user, name="script")

    response = client.post(
        "/api/v1/tokens",
        {"name": "more"},
        content_type="application/json",
        headers=bearer(new.secret),
    )

    assert response.status_code == 401
    assert ApiToken.objects.count() == 1


def test_it_answers_malformed_json_with_400(owner_client: Client) -> None:
    response = owner_client.post("/api/v1/tokens", "{not json", content_type="application/json")

    assert response.status_code == 400
    assert error_of(response) == {
        "code": "malformed_json",
        "message": "The request body is not valid JSON.",
        "details": None,
    }
    assert not ApiToken.objects.exists()
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.API_BAD_INPUT).exists()


@pytest.mark.parametrize(
    ("body", "code"),
    [({}, "invalid_input"), ({"name": 3}, "invalid_input"), ({"name": "  "}, "invalid_input")],
)
def test_it_answers_invalid_input_precisely(owner_client: Client, body: object, code: str) -> None:
    response = owner_client.post("/api/v1/tokens", body, content_type="application/json")

    assert response.status_code in {400, 422}
    assert error_of(response)["code"] == code
    assert not ApiToken.objects.exists()


def test_it_answers_unknown_ids_with_404(owner_client: Client) -> None:
    response = owner_client.post("/api/v1/tokens/999999/revoke")

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_it_answers_json_for_an_unknown_endpoint(client: Client, db: None) -> None:
    response = client.get("/api/v1/no/such/thing")

    assert response.status_code == 404
    assert error_of(response) == {
        "code": "not_found",
        "message": "No such API endpoint.",
        "details": None,
    }


def test_it_answers_json_500_without_leaking_internals(
    owner_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: object) -> None:
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(tokens, "create_token", broken)  # a bug in a service

    response = owner_client.post("/api/v1/tokens", {"name": "x"}, content_type="application/json")

    assert response.status_code == 500
    assert error_of(response)["code"] == "internal_error"
    assert b"secret internal detail" not in response.content


def test_create_api_token_command_prints_a_working_token(client: Client, owner: Owner) -> None:
    out, err = StringIO(), StringIO()

    call_command("create_api_token", "--name", "cron", stdout=out, stderr=err)

    secret = out.getvalue().strip()
    assert "shown only this once" in err.getvalue()
    assert client.get("/api/v1/me", headers=bearer(secret)).json()["token_name"] == "cron"
