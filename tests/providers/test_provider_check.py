"""`manage.py provider_check` against a local server, the SDKs pointed at it by the same env vars
an owner sets to try a gateway."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from missions import catalog, endpoints
from tests.providers import compatible_wire
from tests.providers.anthropic_wire import error_body, reply, text
from tests.providers.openai_wire import Responses
from tests.providers.wire import Failure, Stream, WireServer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_catalog")]


@pytest.fixture
def server(shared_server: WireServer, monkeypatch: pytest.MonkeyPatch) -> WireServer:
    shared_server.answers.clear()
    shared_server.received.clear()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", shared_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", shared_server.url + "/v1")
    return shared_server


def check(*args: str) -> list[dict[str, Any]]:
    out = StringIO()
    call_command("provider_check", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_it_streams_anthropic_events_then_the_cost_with_the_executor_model(
    server: WireServer,
) -> None:
    server.queue(Stream(reply(text(0, "Hello there, ", "dear owner!"), output_tokens=20)))

    lines = check("--provider", "anthropic")

    assert lines[:2] == [
        {"event": "text_delta", "text": "Hello there, "},
        {"event": "text_delta", "text": "dear owner!"},
    ]
    assert lines[2]["event"] == "completed"
    assert lines[2]["stop_reason"] == "end_turn"
    usage = {
        "input_tokens": 12,
        "output_tokens": 20,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    # claude-opus-5-5 at $4 in / $20 out per Mtok: 12 * 4 + 20 * 20 = 448 micro-dollars.
    assert lines[3] == {"usage": usage, "usd_micros": 448, "price_version": catalog.VERSION}
    assert len(lines) == 4
    body = server.received[0].body
    assert body["model"] == "claude-opus-5-5"
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Say hello in five words."}]}
    ]
    assert "tools" not in body


def test_it_sends_the_given_prompt_to_the_first_seeded_openai_model(server: WireServer) -> None:
    server.queue(Responses().message("msg_1", "Hi.").completed(input_tokens=30, output_tokens=12))

    lines = check("--provider", "openai", "Reply with one word.")

    assert lines[0] == {"event": "text_delta", "text": "Hi."}
    assert lines[1]["event"] == "completed"
    # The executor runs on Anthropic, so the first seeded OpenAI model: gpt-6-astra, $10 / $50.
    assert lines[2]["usd_micros"] == 30 * 10 + 12 * 50
    body = server.received[0].body
    assert body["model"] == "gpt-6-astra"
    assert body["input"][0]["content"][0]["text"] == "Reply with one word."
    assert "tools" not in body


def test_it_uses_the_model_given(server: WireServer) -> None:
    server.queue(Stream(reply(text(0, "Hello."))))

    lines = check("--provider", "anthropic", "--model", "claude-unpriced")

    assert server.received[0].body["model"] == "claude-unpriced"
    assert lines[-1]["usd_micros"] == 0
    assert lines[-1]["price_version"] is None


def test_it_names_the_missing_key(server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")

    with pytest.raises(CommandError, match="ANTHROPIC_API_KEY"):
        check("--provider", "anthropic")
    assert server.received == []


def test_it_rejects_an_unknown_provider() -> None:
    with pytest.raises(CommandError, match="Unknown provider 'mistral'"):
        check("--provider", "mistral")


def test_it_reports_a_rejected_key_as_authentication_failed(server: WireServer) -> None:
    server.queue(Failure(401, error_body("authentication_error", "invalid x-api-key")))

    with pytest.raises(CommandError, match=r"authentication_failed.*invalid x-api-key"):
        check("--provider", "anthropic")


def test_it_reports_an_unknown_model_in_the_providers_words(server: WireServer) -> None:
    server.queue(Failure(404, error_body("not_found_error", "model: claude-nope")))

    with pytest.raises(
        CommandError, match=r"unknown_model \(model 'claude-nope'.*model: claude-nope"
    ):
        check("--provider", "anthropic", "--model", "claude-nope")


def test_it_checks_the_compatible_endpoint_without_a_key_on_the_endpoint_s_model(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTOS_COMPATIBLE_API_KEY", raising=False)
    endpoints.put(base_url=server.url + "/v1", model=compatible_wire.MODEL)
    server.queue(compatible_wire.Chat().text("Hello.").finish())

    lines = check("--provider", "compatible")

    assert lines[0] == {"event": "text_delta", "text": "Hello."}
    assert lines[-1]["usd_micros"] == 0  # a local model is free unless priced
    (request,) = server.received
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == compatible_wire.MODEL


def test_it_says_when_no_compatible_endpoint_is_set(server: WireServer) -> None:
    with pytest.raises(CommandError, match="No compatible endpoint is set"):
        check("--provider", "compatible")
