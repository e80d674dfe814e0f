"""The Settings page's providers: write-only keys, the compatible endpoint, the Test button.

The Test button is driven against the local wire servers, through the real SDKs."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agentos.core.models import AuditEvent
from missions import endpoints, keys, pricing
from missions.models import ModelInfo, ModelPrice, ProviderEndpoint, ProviderKey
from missions.providers.base import Usage
from tests.providers.compatible_wire import Chat
from tests.providers.openai_wire import Responses
from tests.providers.wire import Failure, wire_server

KEY = "sk-ant-api03-secret-value-7f3a"
LOCAL_KEY = "local-secret-key-91b2"


@pytest.fixture(autouse=True)
def _no_environment_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)


def card(page: str, provider: str) -> str:
    match = re.search(rf'<section class="card" id="provider-{provider}".*?</section>', page, re.S)
    assert match, f"no card for {provider}"
    return match.group(0)


def test_it_shows_each_providers_state(owner_client: Client) -> None:
    page = owner_client.get("/settings/").content.decode()

    assert "later issues" not in page
    for provider in ("anthropic", "openai", "compatible"):
        assert "not set up" in card(page, provider)
    assert "not set (optional)" in card(page, "compatible")
    assert 'type="password"' in card(page, "anthropic")


def test_it_saves_a_key_and_never_shows_it_back(owner_client: Client) -> None:
    response = owner_client.post(
        "/settings/", {"action": "save_key", "provider": "anthropic", "anthropic-key": KEY}
    )

    assert response.status_code == 302
    assert KEY not in response.content.decode()
    assert keys.get("anthropic") == KEY
    page = owner_client.get(response["Location"])
    content = page.content.decode()
    assert KEY not in content
    assert KEY[-4:] not in content  # not even its end: only when it was set
    anthropic = card(content, "anthropic")
    assert "set on" in anthropic
    assert ">ready<" in anthropic
    assert "Anthropic: the key is saved." in content
    (logged,) = AuditEvent.objects.filter(kind=AuditEvent.Kind.PROVIDER_CHANGED)
    assert logged.detail == {
        "provider": "anthropic",
        "change": "key set",
        "by": "owner",
        "path": "/settings/",
    }


@pytest.mark.parametrize(
    ("key", "error"),
    [
        ("", "Paste the key."),
        ("sk-with a-space-inside", "A key has no spaces or line breaks"),
        ("k7Q2x", "This is too short to be a key"),
    ],
)
def test_it_refuses_a_bad_key_precisely_without_echoing_it(
    owner_client: Client, key: str, error: str
) -> None:
    response = owner_client.post(
        "/settings/", {"action": "save_key", "provider": "openai", "openai-key": key}
    )

    assert response.status_code == 400
    content = response.content.decode()
    assert error in card(content, "openai")
    if key:
        assert key not in content
    assert not ProviderKey.objects.exists()


def test_it_says_when_the_environment_holds_the_key(
    owner_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-0000")

    content = owner_client.get("/settings/").content.decode()

    assert "set in the environment (OPENAI_API_KEY)" in card(content, "openai")
    assert "sk-from-the-environment-0000" not in content


def test_it_forgets_a_stored_key(owner_client: Client) -> None:
    keys.put("openai", KEY)

    response = owner_client.post("/settings/", {"action": "forget_key", "provider": "openai"})

    assert response.status_code == 302
    assert not ProviderKey.objects.exists()
    assert "not set up" in card(owner_client.get("/settings/").content.decode(), "openai")


def test_it_saves_the_compatible_endpoint_with_its_model_free_in_the_catalog(
    owner_client: Client,
) -> None:
    response = owner_client.post(
        "/settings/",
        {
            "action": "save_endpoint",
            "provider": "compatible",
            "compatible-base_url": " http://127.0.0.1:8080/v1/ ",
            "compatible-model": "qwen2.5-coder:7b",
            "compatible-context_window": "32768",
            "compatible-key": LOCAL_KEY,
        },
    )

    assert response.status_code == 302
    assert endpoints.get() == endpoints.Endpoint("http://127.0.0.1:8080/v1", "qwen2.5-coder:7b")
    assert keys.get("compatible") == LOCAL_KEY
    info = ModelInfo.objects.get(provider="compatible", model="qwen2.5-coder:7b")
    assert info.context_window == 32768
    priced = pricing.price_of(
        provider="compatible", model="qwen2.5-coder:7b", usage=Usage(1000, 1000)
    )
    assert priced.cost.usd_micros == 0
    assert priced.price_version == "local"
    content = owner_client.get("/settings/").content.decode()
    compatible = card(content, "compatible")
    assert "http://127.0.0.1:8080/v1" in compatible
    assert ">ready<" in compatible
    assert 'value="32768"' in compatible
    assert LOCAL_KEY not in content


def test_it_keeps_the_endpoint_key_when_the_field_is_left_empty(owner_client: Client) -> None:
    keys.put("compatible", LOCAL_KEY)

    owner_client.post(
        "/settings/",
        {
            "action": "save_endpoint",
            "provider": "compatible",
            "compatible-base_url": "http://gpu-box:8000/v1",
            "compatible-model": "Qwen/Qwen2.5-7B-Instruct",
        },
    )

    assert keys.get("compatible") == LOCAL_KEY
    assert endpoints.get() == endpoints.Endpoint(
        "http://gpu-box:8000/v1", "Qwen/Qwen2.5-7B-Instruct"
    )


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"compatible-base_url": ""}, "This field is required."),
        ({"compatible-base_url": "ftp://box/v1"}, "starts with http:// or https://"),
        ({"compatible-base_url": "http://user:pw@box/v1"}, "Put no user or password"),
        ({"compatible-base_url": "http://box/v1?x=1"}, "no query"),
        ({"compatible-base_url": "http://box:port/v1"}, "This is not a URL."),
        ({"compatible-model": "two words"}, "without spaces"),
        ({"compatible-context_window": "100"}, "greater than or equal to 1024"),
        ({"compatible-key": "tiny"}, "too short to be a key"),
    ],
)
def test_it_refuses_a_bad_endpoint_precisely(
    owner_client: Client, fields: dict[str, str], error: str
) -> None:
    data = {
        "action": "save_endpoint",
        "provider": "compatible",
        "compatible-base_url": "http://127.0.0.1:8080/v1",
        "compatible-model": "llama3.1",
        **fields,
    }

    response = owner_client.post("/settings/", data)

    assert response.status_code == 400
    assert error in card(response.content.decode(), "compatible")
    assert not ProviderEndpoint.objects.exists()


def test_it_removes_the_endpoint(owner_client: Client) -> None:
    endpoints.put(base_url="http://127.0.0.1:8080/v1", model="llama3.1")

    response = owner_client.post(
        "/settings/", {"action": "forget_endpoint", "provider": "compatible"}
    )

    assert response.status_code == 302
    assert endpoints.get() is None
    assert ModelPrice.objects.filter(provider="compatible").exists()  # past runs stay priced


def test_it_tests_a_stored_key_with_one_small_request(
    owner_client: Client, monkeypatch: pytest.MonkeyPatch, seeded_catalog: None
) -> None:
    keys.put("openai", KEY)
    with wire_server() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        server.queue(Responses().message("msg_1", "OK").completed(input_tokens=14))

        response = owner_client.post("/settings/", {"action": "test", "provider": "openai"})

    assert response.status_code == 200
    content = response.content.decode()
    result = card(content, "openai")
    assert "Test passed." in result
    assert "Answer: OK" in result
    assert "14 tokens in" in result
    assert KEY not in content
    (request,) = server.received
    assert {k.lower(): v for k, v in request.headers.items()}["authorization"] == f"Bearer {KEY}"
    assert request.body["max_output_tokens"] == 16


def test_it_tests_the_compatible_endpoint_and_says_why_it_failed_without_the_key(
    owner_client: Client,
) -> None:
    with wire_server() as server:
        endpoints.put(base_url=server.url + "/v1", model="llama3.1")
        keys.put("compatible", LOCAL_KEY)
        # A server that quotes the key it refused: it must still not reach the page.
        refusal = {"error": {"message": f"Invalid API key {LOCAL_KEY}", "type": "auth"}}
        server.queue(Failure(401, refusal))

        response = owner_client.post("/settings/", {"action": "test", "provider": "compatible"})

    content = response.content.decode()
    result = card(content, "compatible")
    assert "Test failed." in result
    assert "The provider refused the key" in result
    assert "Invalid API key …" in result
    assert LOCAL_KEY not in content
    assert server.received[0].path == "/v1/chat/completions"
    assert server.received[0].body["model"] == "llama3.1"


def test_it_says_plainly_when_nothing_answers_at_the_endpoint(owner_client: Client) -> None:
    endpoints.put(base_url="http://127.0.0.1:9/v1", model="llama3.1")

    response = owner_client.post("/settings/", {"action": "test", "provider": "compatible"})

    result = card(response.content.decode(), "compatible")
    assert "Test failed." in result
    assert "Nothing answered at that address" in result


def test_it_answers_an_unknown_action_without_acting(owner_client: Client) -> None:
    response = owner_client.post("/settings/", {"action": "drop_tables", "provider": "openai"})

    assert response.status_code == 302
    assert "not known" in owner_client.get("/settings/").content.decode()


def test_it_tests_the_compatible_endpoint_without_a_key(owner_client: Client) -> None:
    with wire_server() as server:
        endpoints.put(base_url=server.url + "/v1", model="llama3.1")
        server.queue(Chat().text("OK").finish_without_usage())

        response = owner_client.post("/settings/", {"action": "test", "provider": "compatible"})

    result = card(response.content.decode(), "compatible")
    assert "Test passed." in result
    assert "Model llama3.1" in result
    assert server.received[0].body["max_tokens"] == 16
