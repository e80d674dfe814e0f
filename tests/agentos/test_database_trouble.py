"""While the database is unreachable, the console and the API say so plainly: 503 with
`Retry-After`, the same words on a page and in JSON, and health reports it; never a 500.

The database is made unreachable for this process only (`tests.outages`); the chaos test
`tests/chaos/test_database_outage` stops the real server under the real stack.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agentos.core import tokens
from tests.factories import Owner
from tests.outages import database_unreachable

pytestmark = pytest.mark.django_db(transaction=True)

UNREACHABLE = "The database is unreachable"


def test_a_console_page_answers_503_with_a_page_that_needs_no_database(
    owner_client: Client,
) -> None:
    with database_unreachable():
        response = owner_client.get("/missions/")

    assert response.status_code == 503
    assert response["Retry-After"] == "10"
    html = response.content.decode()
    assert UNREACHABLE in html
    assert "Nothing already saved is lost" in html
    assert 'class="topbar"' in html  # the console's shell, not Django's bare page
    assert "Traceback" not in html


def test_an_api_call_answers_503_json(owner: Owner) -> None:
    secret = tokens.create_token(owner=owner.user, name="script").secret
    with database_unreachable():
        response = Client().get("/api/v1/missions", HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert response.status_code == 503
    assert response["Retry-After"] == "10"
    error = response.json()["error"]
    assert error["code"] == "database_unreachable"
    assert error["message"].startswith(UNREACHABLE)


def test_health_reports_the_database_unreachable() -> None:
    with database_unreachable():
        response = Client().get("/api/v1/health")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["database"]["state"] == "down"
    assert body["database"]["detail"] == "the database is unreachable"
    assert body["workers"]["state"] == "unknown"


def test_the_console_works_again_when_the_database_returns(owner_client: Client) -> None:
    with database_unreachable():
        assert owner_client.get("/missions/").status_code == 503

    assert owner_client.get("/missions/").status_code == 200
