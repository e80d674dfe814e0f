"""Settings (provider keys, global caps) over /api/v1 (schedules: test_schedules)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentos.core.models import AuditEvent
from kernel.models import GlobalBudget
from missions import keys
from missions.models import ModelInfo, ProviderEndpoint, ProviderKey
from tests.agentos.test_api import error_of
from tests.api.conftest import Api

KEY = "sk-ant-api03-secret-value-1234"


@pytest.fixture(autouse=True)
def _no_environment_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AGENTOS_COMPATIBLE_API_KEY", raising=False)


# --- provider keys ------------------------------------------------------------------------------


def test_it_sets_a_provider_key_without_ever_showing_it(api: Api) -> None:
    response = api.put("/settings/provider-keys/anthropic", {"key": KEY})

    assert response.status_code == 200
    assert KEY not in response.content.decode()
    assert response.json() == {
        "provider": "anthropic",
        "configured": True,
        "source": "console",
        "hint": "1234",
        "updated_at": response.json()["updated_at"],
    }
    assert keys.get("anthropic") == KEY
    listed = api.get("/settings/provider-keys")
    assert KEY not in listed.content.decode()
    assert [(p["provider"], p["configured"]) for p in listed.json()] == [
        ("anthropic", True),
        ("compatible", False),
        ("openai", False),
    ]


def test_each_key_change_is_in_the_security_log_without_the_key(api: Api) -> None:
    api.put("/settings/provider-keys/anthropic", {"key": KEY})
    api.delete("/settings/provider-keys/anthropic")
    api.delete("/settings/provider-keys/anthropic")  # nothing left to forget: nothing logged

    logged = AuditEvent.objects.filter(kind=AuditEvent.Kind.PROVIDER_CHANGED).order_by("id")
    assert [(e.detail["provider"], e.detail["change"], e.detail["by"]) for e in logged] == [
        ("anthropic", "key set", "token:tests"),
        ("anthropic", "key forgotten", "token:tests"),
    ]
    assert KEY not in json.dumps([e.detail for e in logged])
    assert KEY[-4:] not in json.dumps([e.detail for e in logged])


def test_it_sets_shows_and_removes_the_compatible_endpoint(api: Api) -> None:
    assert api.get("/settings/compatible-endpoint").status_code == 404

    saved = api.put(
        "/settings/compatible-endpoint",
        {"base_url": "http://127.0.0.1:8080/v1/", "model": "llama3.1", "context_window": 8192},
    )

    assert saved.status_code == 200, saved.content
    assert saved.json() == {"base_url": "http://127.0.0.1:8080/v1", "model": "llama3.1"}
    assert api.get("/settings/compatible-endpoint").json() == saved.json()
    assert ModelInfo.objects.get(provider="compatible", model="llama3.1").context_window == 8192
    assert api.delete("/settings/compatible-endpoint").status_code == 204
    assert api.get("/settings/compatible-endpoint").status_code == 404
    changes = AuditEvent.objects.filter(kind=AuditEvent.Kind.PROVIDER_CHANGED)
    assert sorted(e.detail["change"] for e in changes) == ["endpoint removed", "endpoint set"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"base_url": "ftp://host/v1", "model": "m"}, "starts with http:// or https://"),
        ({"base_url": "http://u:p@host/v1", "model": "m"}, "no user or password"),
        ({"base_url": "http://host/v1", "model": "two words"}, "without spaces"),
    ],
)
def test_it_refuses_a_bad_endpoint_and_sets_nothing(
    api: Api, body: dict[str, Any], message: str
) -> None:
    refused = api.put("/settings/compatible-endpoint", body)

    assert refused.status_code == 400
    assert message in refused.json()["error"]["message"]
    assert not ProviderEndpoint.objects.exists()
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.PROVIDER_CHANGED).exists()


def test_the_environment_key_wins_and_is_reported_so(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")

    listed = {p["provider"]: p for p in api.get("/settings/provider-keys").json()}

    assert listed["openai"]["source"] == "environment"
    assert listed["openai"]["hint"] is None


def test_it_deletes_a_provider_key(api: Api) -> None:
    keys.put("openai", KEY)

    response = api.delete("/settings/provider-keys/openai")

    assert (response.status_code, response.content) == (204, b"")
    assert not ProviderKey.objects.exists()
    assert api.delete("/settings/provider-keys/openai").status_code == 204


@pytest.mark.parametrize(
    ("provider", "body", "status", "code"),
    [
        ("acme", {"key": KEY}, 404, "not_found"),
        ("anthropic", {"key": "short"}, 400, "invalid_input"),
        ("anthropic", {"key": "with spaces inside"}, 400, "invalid_input"),
        ("anthropic", {}, 422, "invalid_input"),
        ("anthropic", {"key": KEY, "provider": "openai"}, 422, "invalid_input"),
    ],
)
def test_it_refuses_a_bad_provider_key(
    api: Api, provider: str, body: dict[str, Any], status: int, code: str
) -> None:
    response = api.put(f"/settings/provider-keys/{provider}", body)

    assert (response.status_code, error_of(response)["code"]) == (status, code)
    assert not ProviderKey.objects.exists()
    assert api.delete("/settings/provider-keys/acme").status_code == 404


# --- global caps --------------------------------------------------------------------------------


DEFAULT_CAPS = {
    "daily_usd_micros": 20_000_000,
    "max_running_runs": 64,
    "mission_usd_micros": 5_000_000,
    "mission_tokens": 2_000_000,
    "mission_seconds": 14_400,
}


def test_it_shows_and_changes_the_global_caps(api: Api) -> None:
    # A fresh install: caps are on before the owner has set any.
    assert not GlobalBudget.objects.exists()
    assert api.get("/settings/budget").json() == DEFAULT_CAPS

    changed = api.patch("/settings/budget", {"daily_usd_micros": 5_000_000})
    changed_again = api.patch("/settings/budget", {"max_running_runs": 4})
    cleared = api.patch("/settings/budget", {"daily_usd_micros": None})
    missions = api.patch("/settings/budget", {"mission_tokens": None, "mission_seconds": 600})

    assert changed.json() == {**DEFAULT_CAPS, "daily_usd_micros": 5_000_000}
    assert changed_again.json() == {
        **DEFAULT_CAPS,
        "daily_usd_micros": 5_000_000,
        "max_running_runs": 4,
    }
    assert cleared.json() == {**DEFAULT_CAPS, "daily_usd_micros": None, "max_running_runs": 4}
    assert missions.json() == {
        **DEFAULT_CAPS,
        "daily_usd_micros": None,
        "max_running_runs": 4,
        "mission_tokens": None,
        "mission_seconds": 600,
    }
    budget = GlobalBudget.objects.get()
    assert (budget.daily_usd_micros, budget.max_running_runs) == (None, 4)
    assert (budget.mission_tokens, budget.mission_seconds) == (None, 600)
    # Each change is in the security log, with the caps in force after it.
    logged = AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).order_by("pk")
    assert logged.count() == 4
    assert logged.last().detail["mission_seconds"] == 600  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "body",
    [
        {"daily_usd_micros": -1},
        {"daily_usd_micros": 0},  # reads as "no cap" in the kernel: null says that
        {"daily_usd_micros": "100"},
        {"daily_usd_micros": 2**63},
        {"max_running_runs": None},
        {"max_running_runs": -1},
        {"max_running_runs": 2**31},
        {"max_running_runs": 1.5},
        {"mission_usd_micros": 0},  # a cap of 0 would stop every mission at once
        {"mission_tokens": -1},
        {"mission_seconds": 2**31},
        {"max_tokens": 10},
    ],
)
def test_it_refuses_bad_global_caps_and_changes_nothing(api: Api, body: dict[str, Any]) -> None:
    GlobalBudget.objects.create(daily_usd_micros=1_000_000, max_running_runs=8)

    response = api.patch("/settings/budget", body)

    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_input")
    budget = GlobalBudget.objects.get()
    assert (budget.daily_usd_micros, budget.max_running_runs) == (1_000_000, 8)
