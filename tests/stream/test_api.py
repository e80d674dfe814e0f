"""GET /api/v1/events: the stream by cursor, for scripts."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from kernel import journal

pytestmark = pytest.mark.django_db(transaction=True)


def append(count: int) -> None:
    for index in range(count):
        journal.append_event("tick", run_id=None, index=index)


def test_it_pages_events_by_cursor(owner_client: Client) -> None:
    append(5)

    first = owner_client.get("/api/v1/events", {"limit": 2}).json()
    second = owner_client.get("/api/v1/events", {"after": first["next"], "limit": 2}).json()
    last = owner_client.get("/api/v1/events", {"after": 4, "limit": 2}).json()
    empty = owner_client.get("/api/v1/events", {"after": 5}).json()

    assert [e["number"] for e in first["events"]] == [1, 2]
    assert (first["next"], first["head"]) == (2, 5)
    assert [e["data"]["index"] for e in second["events"]] == [2, 3]
    assert [e["number"] for e in last["events"]] == [5]
    assert (empty["events"], empty["next"], empty["head"]) == ([], 5, 5)
    event = first["events"][0]
    assert set(event) == {"number", "at", "kind", "mission", "run", "seq", "trust", "data", "wait"}
    assert (event["kind"], event["trust"], event["run"]) == ("tick", "system", None)


def test_it_refuses_a_cursor_from_the_future(owner_client: Client) -> None:
    append(1)

    response = owner_client.get("/api/v1/events", {"after": 2})

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "cursor_ahead"
    assert response.json()["error"]["details"] == {"head": 1}


@pytest.mark.parametrize(
    "params",
    [
        {"after": -1},
        {"after": "three"},
        {"after": 2**63},
        {"limit": 0},
        {"limit": 501},
    ],
)
def test_it_answers_bad_parameters_with_422(owner_client: Client, params: dict[str, Any]) -> None:
    response = owner_client.get("/api/v1/events", params)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_input"


def test_it_refuses_strangers(client: Client, db: None) -> None:
    assert client.get("/api/v1/events").status_code == 401
