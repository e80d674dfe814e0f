"""Every error under /api/v1 is JSON in one shape (`{"error": {"code", "message", "details"}}`),
with the status a script expects: 413 for a large body, 401 without a token, 405 with `Allow`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.http import HttpResponse, HttpResponseNotAllowed
from django.test import Client, RequestFactory
from pytest_django.fixtures import Settings

from agentos import api as api_module
from agentos import errorpages
from agentos.core.models import ApiToken
from missions.models import Project
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.factories import Owner, verified_client


def test_it_answers_a_body_over_the_limit_413_naming_the_limit(
    api: Api, settings: Settings
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048

    response = api.post("/projects", {"name": "x" * 5000})

    assert response.status_code == 413
    assert error_of(response) == {
        "code": "body_too_large",
        "message": "The request body is larger than the limit of 2.0 KB (2048 bytes).",
        "details": {"limit_bytes": 2048},
    }
    assert not Project.objects.exists()


def test_it_answers_413_under_an_idempotency_key_too(api: Api, settings: Settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048

    response = api.post("/projects", {"name": "x" * 5000}, key="big-1")

    assert response.status_code == 413
    assert error_of(response)["code"] == "body_too_large"


def test_it_names_the_default_limit_in_megabytes(api: Api) -> None:
    response = api.post("/projects", {"name": "x" * (5 * 1024 * 1024)})

    assert response.status_code == 413
    assert "2.5 MB (2621440 bytes)" in str(error_of(response)["message"])


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/projects"),
        ("POST", "/projects"),
        ("PUT", "/settings/provider-keys/openai"),
        ("PATCH", "/settings/budget"),
        ("DELETE", "/schedules/1"),
    ],
)
def test_it_answers_401_without_a_token_on_any_method(db: None, method: str, path: str) -> None:
    # A script has no session: CSRF is enforced as in production, and must not be what it hears.
    client = Client(enforce_csrf_checks=True)

    response = client.generic(method, "/api/v1" + path, "{}", content_type="application/json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert error_of(response)["code"] == "unauthenticated"


def test_it_answers_401_with_the_reason_for_a_bad_token(db: None) -> None:
    client = Client(enforce_csrf_checks=True)

    response = client.post(
        "/api/v1/projects",
        "{}",
        content_type="application/json",
        headers={"Authorization": "Bearer aos_not-a-token"},
    )

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    assert error_of(response)["code"] == "invalid_token"


def test_a_signed_in_browser_still_needs_its_csrf_token(owner: Owner) -> None:
    client = verified_client(owner, Client(enforce_csrf_checks=True))
    client.get("/more/")  # a console page sets the CSRF cookie
    body = json.dumps({"name": "notes"})

    refused = client.post("/api/v1/projects", body, content_type="application/json")
    accepted = client.post(
        "/api/v1/projects",
        body,
        content_type="application/json",
        headers={"X-CSRFToken": client.cookies[django_settings.CSRF_COOKIE_NAME].value},
    )

    assert (refused.status_code, error_of(refused)["code"]) == (403, "csrf_failed")
    assert accepted.status_code == 201


def test_it_answers_a_wrong_method_405_in_json_with_allow(api: Api) -> None:
    response = api.delete("/missions")

    assert response.status_code == 405
    assert response["Allow"] == "GET, POST"
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert error_of(response) == {
        "code": "method_not_allowed",
        "message": "DELETE is not allowed here; use GET or POST.",
        "details": {"allowed": ["GET", "POST"]},
    }


def test_it_answers_an_unknown_path_404_in_json(api: Api) -> None:
    response = api.get("/no-such-thing")

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_it_answers_a_crash_500_in_json(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from missions import projects

    def crash(**kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(projects, "create_project", crash)

    response = api.post("/projects", {"name": "notes"})

    assert response.status_code == 500
    assert error_of(response)["code"] == "internal_error"
    assert "boom" not in response.content.decode()


def test_a_token_without_the_scope_gets_403_in_json(client: Client, owner: Owner) -> None:
    from agentos.core import tokens

    reader = tokens.create_token(owner=owner.user, name="reader", scopes=["read"]).secret

    response = client.post(
        "/api/v1/projects",
        "{}",
        content_type="application/json",
        headers={"Authorization": f"Bearer {reader}"},
    )

    assert response.status_code == 403
    assert error_of(response)["code"] == "insufficient_scope"
    assert response["WWW-Authenticate"] == 'Bearer error="insufficient_scope", scope="act"'
    assert ApiToken.objects.count() == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "bad_request"),
        (401, "unauthenticated"),
        (403, "forbidden"),
        (404, "not_found"),
        (409, "conflict"),
        (413, "body_too_large"),
        (422, "invalid_input"),
        (429, "too_many_requests"),
        (500, "internal_error"),
        (503, "unavailable"),
    ],
)
def test_any_other_error_under_the_api_becomes_json(status: int, code: str) -> None:
    # Whatever answered (Django, a middleware, the server's own pages): the shape is the same.
    request = RequestFactory().get("/api/v1/anything")
    middleware = api_module.json_errors(lambda _request: HttpResponse(b"<h1>x</h1>", status=status))

    response = middleware(request)

    assert response.status_code == status
    assert error_of(response)["code"] == code
    assert error_of(response)["message"]


def test_it_keeps_the_allow_header_when_it_rewrites_a_405() -> None:
    request = RequestFactory().put("/api/v1/anything")
    middleware = api_module.json_errors(lambda _request: HttpResponseNotAllowed(["POST", "GET"]))

    response = middleware(request)

    assert response["Allow"] == "GET, POST"
    assert error_of(response)["details"] == {"allowed": ["GET", "POST"]}


def test_it_leaves_console_errors_alone() -> None:
    request = RequestFactory().get("/missions/1/")
    middleware = api_module.json_errors(lambda _request: HttpResponse(b"<h1>x</h1>", status=404))

    response = middleware(request)

    assert isinstance(response, HttpResponse)
    assert response.content == b"<h1>x</h1>"


@pytest.mark.parametrize(
    ("handler", "status"),
    [
        (errorpages.bad_request, 400),
        (errorpages.permission_denied, 403),
        (errorpages.not_found, 404),
    ],
)
def test_the_sites_error_handlers_answer_json_under_the_api(
    db: None, handler: Any, status: int
) -> None:
    request = RequestFactory().get("/api/v1/anything")

    response = handler(request, Exception("x"))

    assert response.status_code == status
    assert response["Content-Type"].startswith("application/json")
    assert error_of(response)["message"]


def test_the_sites_500_handler_answers_json_under_the_api() -> None:
    response = errorpages.server_error(RequestFactory().get("/api/v1/anything"))

    assert response.status_code == 500
    assert error_of(response)["code"] == "internal_error"


@pytest.mark.parametrize("authorization", [None, "Bearer aos_not-a-token", "Basic b3duZXI6eA=="])
def test_it_asks_a_stranger_who_it_is_before_what_method(
    db: None, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}

    response = Client(enforce_csrf_checks=True).delete("/api/v1/missions", headers=headers)

    assert response.status_code == 401
    assert "Allow" not in response
    assert response["WWW-Authenticate"].startswith("Bearer")
    expected = "invalid_token" if authorization and "aos_" in authorization else "unauthenticated"
    assert error_of(response)["code"] == expected


def test_a_public_route_answers_a_wrong_method_405_to_anyone(db: None) -> None:
    response = Client().post("/api/v1/health")

    assert response.status_code == 405
    assert response["Allow"] == "GET"


def test_every_error_body_has_the_same_three_keys(api: Api, client: Client) -> None:
    answers = {
        "unauthenticated": client.get("/api/v1/missions"),
        "unknown endpoint": api.get("/no-such-thing"),
        "unknown mission": api.get("/missions/999999"),
        "wrong method": api.delete("/missions"),
        "invalid input": api.post("/missions", {}),
    }

    shapes = {name: tuple(sorted(error_of(answer))) for name, answer in answers.items()}
    assert shapes == dict.fromkeys(answers, ("code", "details", "message"))
    assert error_of(answers["unauthenticated"])["details"] is None
    assert error_of(answers["unknown endpoint"])["details"] is None


def locations(response: Any) -> list[list[str]]:
    details = error_of(response)["details"]
    assert isinstance(details, list)
    return [item["loc"] for item in details]


def test_a_body_error_is_located_in_the_body_not_in_an_argument(api: Api) -> None:
    response = api.post("/missions", {"project_id": "seven"})

    assert response.status_code == 422
    assert locations(response) == [["body", "project_id"]]


def test_an_empty_body_names_the_first_field_it_lacks(api: Api) -> None:
    response = api.client.post(
        "/api/v1/projects", content_type="application/json", headers=api.headers()
    )

    assert response.status_code == 422
    assert locations(response) == [["body", "name"]]
