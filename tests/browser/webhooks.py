"""Webhooks in a browser test: a delivery signed as agentos signs it (`missions.webhooks`), posted
as a sender would, and a local model server for the missions deliveries start."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.providers.wire import WireServer, wire_server


@pytest.fixture
def wire() -> Iterator[WireServer]:
    with wire_server() as server:
        yield server


def deliver(url: str, secret: str, body: bytes, delivery: str) -> httpx.Response:
    stamp = int(time.time())
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return httpx.post(
        url,
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-Agentos-Delivery": delivery,
            "X-Agentos-Signature": f"t={stamp},v1={digest}",
        },
        timeout=30,
    )
