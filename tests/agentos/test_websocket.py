from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client, override_settings

from agentos.core.models import AuditEvent
from agentos.websocket import CLOSE_UNAUTHENTICATED, websocket_application
from kernel import bus
from tests.factories import Owner, verified_client

pytestmark = pytest.mark.django_db(transaction=True)

SAME_ORIGIN = b"http://127.0.0.1:8000"


def communicator(
    *, origin: bytes | None, client: Client | None = None, host: bytes = b"127.0.0.1:8000"
) -> WebsocketCommunicator:
    headers: list[tuple[bytes, bytes]] = [(b"host", host)]
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


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        (b"https://evil.example", b"127.0.0.1:8000"),
        (b"http://127.0.0.1.evil.example", b"127.0.0.1:8000"),
        # Another port of the same host is another origin: a dev server on :3000 is not us.
        (b"http://localhost:3000", b"localhost:8000"),
        (b"http://127.0.0.1", b"127.0.0.1:8000"),
        # The same host and port under another scheme is another origin too.
        (b"https://127.0.0.1:8000", b"127.0.0.1:8000"),
        # DNS rebinding: the page's origin and Host agree, but Host is not one of ours.
        (b"http://rebound.example:8000", b"rebound.example:8000"),
        (b"null", b"127.0.0.1:8000"),
    ],
)
async def test_it_refuses_a_foreign_origin(origin: bytes, host: bytes) -> None:
    owner = await sync_to_async(_verified_owner_client)()
    socket = communicator(origin=origin, client=owner, host=host)

    connected, _code = await socket.connect()

    assert not connected
    assert [event["reason"] for event in await refusals()] == ["foreign_origin"]


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        (SAME_ORIGIN, b"127.0.0.1:8000"),
        (b"http://localhost:8000", b"localhost:8000"),
        (b"HTTP://LocalHost:8000", b"localhost:8000"),
        (b"http://localhost", b"localhost:80"),
    ],
)
async def test_it_accepts_the_owner_from_the_same_origin(origin: bytes, host: bytes) -> None:
    owner = await sync_to_async(_verified_owner_client)()
    socket = communicator(origin=origin, client=owner, host=host)

    connected, _code = await socket.connect()

    assert connected
    assert await socket.receive_json_from() == {"type": "hello"}
    await socket.disconnect()


async def test_it_accepts_a_trusted_origin_and_only_that_one() -> None:
    owner = await sync_to_async(_verified_owner_client)()

    with override_settings(CSRF_TRUSTED_ORIGINS=["https://agentos.example"]):
        trusted = communicator(origin=b"https://agentos.example", client=owner)
        connected, _code = await trusted.connect()
        assert connected
        await trusted.disconnect()
        for other in (b"http://agentos.example", b"https://agentos.example:8443"):
            refused, _code = await communicator(origin=other, client=owner).connect()
            assert not refused


async def test_it_takes_https_from_a_trusted_proxy_only() -> None:
    owner = await sync_to_async(_verified_owner_client)()
    https = b"https://127.0.0.1:8000"

    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        proxied = communicator(origin=https, client=owner)
        proxied.scope["headers"].append((b"x-forwarded-proto", b"https"))
        connected, _code = await proxied.connect()
        assert connected
        await proxied.disconnect()
        plain, _code = await communicator(origin=https, client=owner).connect()
        assert not plain


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


# --- Scripts: an API token in the handshake's Authorization header ------------------------------


def _token(*scopes: str) -> str:
    from agentos.core import tokens
    from tests.factories import make_owner

    owner = make_owner()
    return tokens.create_token(owner=owner.user, name="stream", scopes=list(scopes)).secret


def token_communicator(
    authorization: str, *, origin: bytes | None = None, client: Client | None = None
) -> WebsocketCommunicator:
    socket = communicator(origin=origin, client=client)
    socket.scope["headers"].append((b"authorization", authorization.encode()))
    return socket


async def test_it_accepts_a_script_with_a_read_token_and_no_origin() -> None:
    secret = await sync_to_async(_token)("read")
    socket = token_communicator(f"Bearer {secret}")

    connected, _code = await socket.connect()

    assert connected
    assert await socket.receive_json_from() == {"type": "hello"}
    await socket.send_json_to({"type": "resume", "after": "now"})
    await sync_to_async(bus.ring)("health")
    assert await socket.receive_json_from() == {"type": "health"}
    await socket.disconnect()


async def test_a_token_needs_no_origin_because_no_page_can_send_one() -> None:
    # A browser's WebSocket cannot set Authorization: a foreign page has only the owner's cookie,
    # which the origin rule guards. A token is proof on its own, from wherever it is sent.
    secret = await sync_to_async(_token)("read", "act")
    socket = token_communicator(f"bearer {secret}", origin=b"https://elsewhere.example")

    connected, _code = await socket.connect()

    assert connected
    await socket.disconnect()


@pytest.mark.parametrize(
    ("scopes", "sent", "reason"),
    [
        (("read",), "Bearer aos_not-a-token", "invalid_token"),
        (("act",), None, "missing_scope"),
    ],
)
async def test_it_refuses_a_bad_token_or_one_without_read(
    scopes: tuple[str, ...], sent: str | None, reason: str
) -> None:
    secret = await sync_to_async(_token)(*scopes)
    socket = token_communicator(sent or f"Bearer {secret}")

    connected, code = await socket.connect()

    assert not connected
    assert code == CLOSE_UNAUTHENTICATED
    assert reason in [event["reason"] for event in await refusals()]


async def test_a_bad_token_is_refused_even_beside_the_owners_session() -> None:
    # The token, when sent, decides: a cookie never rescues a refused token.
    owner = await sync_to_async(_verified_owner_client)()
    socket = token_communicator("Bearer aos_not-a-token", origin=SAME_ORIGIN, client=owner)

    connected, _code = await socket.connect()

    assert not connected


async def test_another_authorization_scheme_is_no_token() -> None:
    socket = token_communicator("Basic b3duZXI6cGFzc3dvcmQ=")

    connected, _code = await socket.connect()

    assert not connected
    assert [event["reason"] for event in await refusals()] == ["no_origin"]
