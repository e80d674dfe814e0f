from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from agentos import database
from agentos.env import env_bool, env_int


def check_ids(**kwargs: object) -> set[str]:
    return {message.id for message in run_checks(**kwargs) if message.id}  # type: ignore[arg-type]


def test_it_passes_its_own_checks(db: None) -> None:
    assert not {i for i in check_ids(databases=["default"]) if i.startswith("agentos")}


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"ALLOWED_HOSTS": []}, "agentos.E003"),
        ({"CSRF_TRUSTED_ORIGINS": ["example.com"]}, "agentos.E002"),
        ({"HUEY": {"immediate": None}}, "agentos.E004"),
        (
            {"CHANNEL_LAYERS": {"default": {"BACKEND": "x", "CONFIG": {"NAME": "db"}}}},
            "agentos.E006",
        ),
        ({"HTTPS": True, "SESSION_COOKIE_NAME": "sessionid"}, "agentos.E001"),
        ({"DEBUG": True}, "agentos.W001"),
    ],
)
def test_it_reports_misconfiguration(override: dict[str, object], expected: str) -> None:
    with override_settings(**override):
        assert expected in check_ids()


def test_it_parses_a_socket_url() -> None:
    entry = database.parse_url("postgresql://postgres@/agentos?host=/run/pg&port=5433")

    assert (entry["NAME"], entry["USER"], entry["HOST"], entry["PORT"]) == (
        "agentos",
        "postgres",
        "/run/pg",
        "5433",
    )
    assert database.parse_url(database.build_url(entry)) == entry


def test_it_parses_a_tcp_url_with_escaped_password() -> None:
    entry = database.parse_url("postgres://app:p%40ss@db.internal:5432/agentos?sslmode=require")

    assert entry["PASSWORD"] == "p@ss"
    assert entry["HOST"] == "db.internal"
    assert entry["OPTIONS"] == {"sslmode": "require"}
    assert database.parse_url(database.build_url(entry)) == entry


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://x@host/db", "must start with postgresql://"),
        ("postgresql://x@host/", "names no database"),
    ],
)
def test_it_refuses_a_bad_database_url(url: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        database.parse_url(url)


def test_it_refuses_a_bad_boolean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTOS_X", "maybe")

    with pytest.raises(ImproperlyConfigured, match="AGENTOS_X='maybe' is not a boolean"):
        env_bool("AGENTOS_X")


def test_it_refuses_an_integer_below_its_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTOS_X", "0")

    with pytest.raises(ImproperlyConfigured, match="below its minimum 1"):
        env_int("AGENTOS_X", 5, minimum=1)
