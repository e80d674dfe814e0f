from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from agentos.core import tokens
from tests.factories import Owner

PREFIX = "/api/v1"


class Api:
    """The owner's script: a bearer token, JSON in and out, an optional Idempotency-Key."""

    def __init__(self, client: Client, secret: str) -> None:
        self.client = client
        self.secret = secret

    def headers(self, key: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.secret}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.get(PREFIX + path, params or {}, headers=self.headers())

    def send(self, method: str, path: str, body: Any = None, *, key: str | None = None) -> Any:
        data = body if isinstance(body, str | bytes) else json.dumps(body or {})
        return self.client.generic(
            method, PREFIX + path, data, content_type="application/json", headers=self.headers(key)
        )

    def post(self, path: str, body: Any = None, *, key: str | None = None) -> Any:
        return self.send("POST", path, body, key=key)

    def put(self, path: str, body: Any = None, *, key: str | None = None) -> Any:
        return self.send("PUT", path, body, key=key)

    def patch(self, path: str, body: Any = None, *, key: str | None = None) -> Any:
        return self.send("PATCH", path, body, key=key)

    def delete(self, path: str, *, key: str | None = None) -> Any:
        return self.send("DELETE", path, key=key)


@pytest.fixture
def secret(owner: Owner) -> str:
    return tokens.create_token(owner=owner.user, name="tests").secret


@pytest.fixture
def api(client: Client, secret: str) -> Api:
    return Api(client, secret)


@pytest.fixture
def approver(client: Client, owner: Owner) -> Api:
    """A script trusted with owner decisions: its token has the `approve` scope too."""
    scopes = ["read", "act", "approve"]
    return Api(client, tokens.create_token(owner=owner.user, name="approver", scopes=scopes).secret)
