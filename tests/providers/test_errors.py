"""Every kind of provider failure, classified the same way for the three providers, through the
real SDKs against local servers: HTTP errors from the wire server, and raw sockets for what
HTTP cannot say (a refused connection, a reset, a server that never answers)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from missions.providers.anthropic import AnthropicProvider
from missions.providers.base import Conversation, Options, Provider, ProviderError
from missions.providers.compatible import CompatibleProvider
from missions.providers.errors import Trouble, classify
from missions.providers.openai import OpenAIProvider
from tests.providers.wire import Failure, WireServer


@dataclass(frozen=True)
class Flavour:
    """How one provider is reached and how it words an error body."""

    name: str
    make: Callable[[str], Provider]
    body: Callable[[str, str, str | None], dict[str, Any]]
    overloaded: int  # the status it says "overloaded" with
    quota: Failure  # how it says the account cannot pay


def _anthropic_body(kind: str, message: str, code: str | None) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _openai_body(kind: str, message: str, code: str | None) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, "code": code, "param": None}}


FLAVOURS = [
    Flavour(
        "anthropic",
        lambda url: AnthropicProvider(api_key="test-key", base_url=url),
        _anthropic_body,
        529,
        Failure(402, _anthropic_body("billing_error", "Your credit balance is too low.", None)),
    ),
    Flavour(
        "openai",
        lambda url: OpenAIProvider(api_key="test-key", base_url=url + "/v1"),
        _openai_body,
        503,
        Failure(
            429,
            _openai_body("insufficient_quota", "You exceeded your quota.", "insufficient_quota"),
        ),
    ),
    Flavour(
        "compatible",
        lambda url: CompatibleProvider(base_url=url + "/v1", api_key="local-key"),
        _openai_body,
        503,
        Failure(
            429,
            _openai_body("insufficient_quota", "You exceeded your quota.", "insufficient_quota"),
        ),
    ),
]


@pytest.fixture(params=FLAVOURS, ids=lambda flavour: flavour.name)
def flavour(request: pytest.FixtureRequest) -> Flavour:
    return request.param  # type: ignore[no-any-return]  # pytest's params are untyped


def trouble_of(flavour: Flavour, url: str, *, timeout: float = 10.0) -> Trouble:
    provider = flavour.make(url)
    conversation = Conversation(
        provider=flavour.name, system="Be brief.", items=[provider.user_message("Hello.")]
    )
    options = Options(model="some-model", timeout_seconds=timeout)
    with pytest.raises(ProviderError) as caught:
        list(provider.stream(conversation, [], options))
    return classify(caught.value)


def failing(flavour: Flavour, server: WireServer, answer: Failure) -> Trouble:
    server.queue(answer)
    trouble = trouble_of(flavour, server.url)
    assert len(server.received) == 1  # the SDK retried nothing: the engine decides
    return trouble


def test_it_classifies_a_rate_limit_with_its_retry_after(
    flavour: Flavour, server: WireServer
) -> None:
    body = flavour.body("rate_limit_error", "Slow down.", "rate_limit_exceeded")
    trouble = failing(flavour, server, Failure(429, body, {"retry-after": "7"}))

    assert (trouble.kind, trouble.transient, trouble.retry_after) == ("rate_limited", True, 7.0)
    assert trouble.status == 429


def test_it_classifies_a_rate_limit_without_retry_after(
    flavour: Flavour, server: WireServer
) -> None:
    body = flavour.body("rate_limit_error", "Slow down.", None)
    trouble = failing(flavour, server, Failure(429, body))

    assert (trouble.kind, trouble.transient, trouble.retry_after) == ("rate_limited", True, None)


def test_it_classifies_overloaded(flavour: Flavour, server: WireServer) -> None:
    body = flavour.body("overloaded_error", "Overloaded", None)
    trouble = failing(flavour, server, Failure(flavour.overloaded, body))

    assert (trouble.kind, trouble.transient) == ("overloaded", True)
    assert trouble.describe(flavour.name).endswith(f"overloaded ({flavour.overloaded})")


def test_it_classifies_a_server_error(flavour: Flavour, server: WireServer) -> None:
    body = flavour.body("api_error", "Internal server error", None)
    trouble = failing(flavour, server, Failure(502, body, {"retry-after": "3"}))

    assert (trouble.kind, trouble.transient, trouble.retry_after) == ("server_error", True, 3.0)


def test_it_classifies_a_refused_key(flavour: Flavour, server: WireServer) -> None:
    body = flavour.body("authentication_error", "invalid api key", "invalid_api_key")
    trouble = failing(flavour, server, Failure(401, body))

    assert (trouble.kind, trouble.transient, trouble.owner_fixes) == ("authentication", False, True)


def test_it_classifies_an_unpaid_account(flavour: Flavour, server: WireServer) -> None:
    trouble = failing(flavour, server, flavour.quota)

    assert (trouble.kind, trouble.transient, trouble.owner_fixes) == ("quota", False, True)
    assert trouble.retry_after is None


def test_it_classifies_an_invalid_request(flavour: Flavour, server: WireServer) -> None:
    body = flavour.body("invalid_request_error", "messages: field required", None)
    trouble = failing(flavour, server, Failure(400, body))

    assert (trouble.kind, trouble.transient, trouble.owner_fixes) == (
        "invalid_request",
        False,
        False,
    )


def test_it_classifies_a_refused_connection(flavour: Flavour) -> None:
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    trouble = trouble_of(flavour, f"http://127.0.0.1:{port}")

    assert (trouble.kind, trouble.transient) == ("network", True)


@pytest.fixture
def raw_server() -> Iterator[tuple[str, Callable[[str], None]]]:
    """A socket server that reads a request then resets the connection ("reset") or never
    answers ("silent")."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    mode = ["reset"]
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                peer, _address = listener.accept()
            except OSError:
                return
            peer.recv(65536)
            if mode[0] == "reset":
                # Linger 0: close() sends a RST instead of a FIN.
                peer.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                peer.close()
            else:
                held.append(peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield (
            f"http://127.0.0.1:{listener.getsockname()[1]}",
            lambda value: mode.__setitem__(0, value),
        )
    finally:
        listener.close()
        for peer in held:
            peer.close()


def test_it_classifies_a_reset_connection(
    flavour: Flavour, raw_server: tuple[str, Callable[[str], None]]
) -> None:
    url, _mode = raw_server

    trouble = trouble_of(flavour, url)

    assert (trouble.kind, trouble.transient) == ("network", True)


def test_it_classifies_a_timeout(
    flavour: Flavour, raw_server: tuple[str, Callable[[str], None]]
) -> None:
    url, mode = raw_server
    mode("silent")

    trouble = trouble_of(flavour, url, timeout=0.5)

    assert (trouble.kind, trouble.transient) == ("timeout", True)
    assert trouble.describe(flavour.name).endswith("timed out")
