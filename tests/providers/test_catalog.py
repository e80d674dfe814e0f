"""The catalog refreshed from the providers' model-listing APIs, through the real SDKs against a
local server answering `GET /v1/models` as the public references show it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anthropic
import openai
import pytest
from django.utils import timezone

from missions import catalog
from missions.models import ModelInfo
from missions.providers.base import AuthenticationFailed, BadRequest
from tests.providers.wire import Failure, Json, Received, WireServer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_catalog")]


@pytest.fixture
def anthropic_env(server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)


def anthropic_client(server: WireServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=server.url, max_retries=0)


def anthropic_model(model_id: str, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model_id,
        "display_name": name,
        "created_at": "2026-10-01T00:00:00Z",
        **extra,
    }


def anthropic_page(*models: dict[str, Any], has_more: bool = False) -> Json:
    return Json(
        body={
            "data": list(models),
            "has_more": has_more,
            "first_id": models[0]["id"] if models else None,
            "last_id": models[-1]["id"] if models else None,
        }
    )


def header(request: Received, name: str) -> str | None:
    return {key.lower(): value for key, value in request.headers.items()}.get(name)


def openai_listing(*ids: str) -> Json:
    data = [
        {"id": model_id, "object": "model", "created": 1767225600, "owned_by": "openai"}
        for model_id in ids
    ]
    return Json(body={"object": "list", "data": data})


def test_it_refreshes_anthropic_models_with_windows_and_output_caps(server: WireServer) -> None:
    server.queue(
        anthropic_page(
            anthropic_model(
                "claude-opus-5-5", "Claude Opus 5.5", max_input_tokens=1_000_000, max_tokens=128_000
            ),
            has_more=True,
        ),
        anthropic_page(anthropic_model("claude-new-6", "Claude New 6")),
    )

    rows = catalog.refresh("anthropic", client=anthropic_client(server))

    assert [row.model for row in rows] == ["claude-opus-5-5", "claude-new-6"]
    opus = ModelInfo.objects.get(provider="anthropic", model="claude-opus-5-5")
    assert (opus.display_name, opus.context_window, opus.max_output_tokens) == (
        "Claude Opus 5.5",
        1_000_000,
        128_000,
    )
    assert opus.fetched_at is not None
    assert timezone.now() - opus.fetched_at < timedelta(minutes=1)
    # An older API (or a gateway) says nothing of the window: unknown stays unknown.
    new = ModelInfo.objects.get(provider="anthropic", model="claude-new-6")
    assert (new.display_name, new.context_window, new.max_output_tokens) == (
        "Claude New 6",
        None,
        None,
    )
    # Both pages were read, the second after the first one's last id.
    assert [(request.method, request.path) for request in server.received] == [
        ("GET", "/v1/models"),
        ("GET", "/v1/models?after_id=claude-opus-5-5"),
    ]
    assert header(server.received[0], "authorization") == "Bearer test-key"


def test_it_keeps_seeded_models_the_listing_leaves_out(server: WireServer) -> None:
    server.queue(anthropic_page(anthropic_model("claude-new-6", "Claude New 6")))

    catalog.refresh("anthropic", client=anthropic_client(server))

    haiku = ModelInfo.objects.get(provider="anthropic", model="claude-haiku-5-5")
    assert haiku.fetched_at is None


def test_it_does_not_erase_what_the_api_leaves_out(server: WireServer) -> None:
    ModelInfo.objects.filter(provider="anthropic", model="claude-opus-5-5").update(
        context_window=500_000
    )
    server.queue(anthropic_page(anthropic_model("claude-opus-5-5", "Claude Opus 5.5")))

    catalog.refresh("anthropic", client=anthropic_client(server))

    opus = ModelInfo.objects.get(provider="anthropic", model="claude-opus-5-5")
    assert opus.context_window == 500_000
    assert opus.fetched_at is not None


def test_it_refreshes_openai_models_by_id_only(server: WireServer) -> None:
    server.queue(openai_listing("gpt-6-luna", "gpt-7-nova"))

    client = openai.OpenAI(api_key="test-key", base_url=server.url + "/v1", max_retries=0)
    rows = catalog.refresh("openai", client=client)

    assert [row.model for row in rows] == ["gpt-6-luna", "gpt-7-nova"]
    nova = ModelInfo.objects.get(provider="openai", model="gpt-7-nova")
    assert (nova.display_name, nova.context_window, nova.max_output_tokens) == ("", None, None)
    assert nova.fetched_at is not None
    request = server.received[0]
    assert (request.method, request.path) == ("GET", "/v1/models")
    assert header(request, "authorization") == "Bearer test-key"


def test_it_raises_authentication_failed_on_a_401_and_writes_nothing(
    server: WireServer,
) -> None:
    server.queue(
        Failure(401, {"type": "error", "error": {"type": "authentication_error", "message": "no"}})
    )

    with pytest.raises(AuthenticationFailed):
        catalog.refresh("anthropic", client=anthropic_client(server))

    assert not ModelInfo.objects.filter(fetched_at__isnull=False).exists()


def test_it_reads_a_missing_listing_endpoint_as_a_bad_request(server: WireServer) -> None:
    server.queue(Failure(404, {"error": {"message": "Not found", "code": None}}))

    client = openai.OpenAI(api_key="test-key", base_url=server.url + "/v1", max_retries=0)
    with pytest.raises(BadRequest, match="model-listing endpoint"):
        catalog.refresh("openai", client=client)


@pytest.mark.usefixtures("anthropic_env")
def test_it_refreshes_a_stale_catalog_through_the_environment(server: WireServer) -> None:
    two_days_ago = timezone.now() - timedelta(days=2)
    ModelInfo.objects.filter(provider="anthropic").update(fetched_at=two_days_ago)
    server.queue(anthropic_page(anthropic_model("claude-opus-5-5", "Claude Opus 5.5")))

    rows = catalog.refresh_if_stale("anthropic")

    assert rows is not None
    assert [row.model for row in rows] == ["claude-opus-5-5"]
    assert len(server.received) == 1


@pytest.mark.usefixtures("anthropic_env")
def test_it_does_not_call_the_api_when_the_catalog_is_fresh(server: WireServer) -> None:
    ModelInfo.objects.filter(provider="anthropic", model="claude-opus-5-5").update(
        fetched_at=timezone.now() - timedelta(hours=2)
    )

    assert catalog.refresh_if_stale("anthropic") is None
    assert server.received == []


def test_it_does_not_call_the_api_without_a_key(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)

    assert catalog.refresh_if_stale("anthropic") is None
    assert server.received == []
