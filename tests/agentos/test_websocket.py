from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agentos.models import AuditEvent
from agentos.websocket import CLOSE_UNAUTHENTICATED, websocket_application
from kernel import bus
from tests.factories import Owner, verified_client

pytestmark = pytest.mark.django_db(transaction=True)

SAME_ORIGIN = b"http://127.0.0.1:8000"


def communicator(*, origin: bytes | None, client: Client | None = None) -> WebsocketCommunicator:
    headers: list[tuple[bytes, bytes]] = [(b"host", b"127.0.0.1:8000")]
    if origin is not None:
        headers.append((b"origin", origin))
    if client is not None:
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(websocket_application(), "/ws/events", headers=headers)


@sync_to_async
def refusals() -> list[dict[str, Any]]:
    rows = AuditEvent.objects.filter(kind=AuditEvent.Kind.WEBSOCKET_REFUSED)
    return list(rows.values_list("detail", flat=True))


@pytest.mark.parametrize("origin", [b"https://evil.example", b"http://127.0.0.1.evil.example"])
async def test_it_refuses_a_foreign_origin(origin: bytes) -> None:
    owner = await sync_to_async(_verified_owner_client)()
    socket = communicator(origin=origin, client=owner)

    connected, _code = await socket.connect()

    assert not connected
    assert [event["reason"] for event in await refusals()] == ["foreign_origin"]


async def test_it_refuses_a_missing_origin() -> None:
    connected, _code = await communicator(origin=None).connect()

    assert not connected
    assert [event["reason"] for event in await refusals()] == ["no_origin"]


async def test_it_refuses_a_stranger_from_the_same_origin() -> None:
    socket = communicator(origin=SAME_ORIGIN)

    connected, code = await socket.connect()

    assert not connected
    assert code == CLOSE_UNAUTHENTICATED
    assert [event["reason"] for event in await refusals()] == ["unauthenticated"]


async def test_it_refuses_a_session_without_second_factor() -> None:
    client = await sync_to_async(_password_only_client)()

    connected, code = await communicator(origin=SAME_ORIGIN, client=client).connect()

    assert not connected
    assert code == CLOSE_UNAUTHENTICATED


async def test_it_rings_the_owner_when_state_changes() -> None:
    client = await sync_to_async(_verified_owner_client)()
    socket = communicator(origin=SAME_ORIGIN, client=client)

    connected, _code = await socket.connect()
    assert connected
    assert await socket.receive_json_from() == {"type": "hello"}
    await sync_to_async(bus.ring)("health")

    assert await socket.receive_json_from() == {"type": "health"}
    await socket.disconnect()


def _verified_owner_client() -> Client:
    from tests.factories import make_owner

    return verified_client(make_owner())


def _password_only_client() -> Client:
    from tests.factories import make_owner

    owner: Owner = make_owner()
    client = Client()
    client.force_login(owner.user)
    return client
