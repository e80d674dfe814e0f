from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import override_settings

from agentos import health
from agentos.core import database
from agentos.core.env import env_bool, env_int

BASE_DIR = Path(__file__).resolve().parents[2]


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


def settings_in_subprocess(extra_env: dict[str, str], expression: str) -> object:
    """Evaluate `expression` against the product settings as a fresh process would load them."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": "postgresql://nobody@/nothing",  # parsed only, never connected
        **extra_env,
    }
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        f"print(json.dumps({expression}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_it_uses_host_prefixed_secure_cookies_over_https(tmp_path: Path) -> None:
    values = settings_in_subprocess(
        {"AGENTOS_HTTPS": "1", "AGENTOS_DATA_DIR": str(tmp_path)},
        "[s.SESSION_COOKIE_NAME, s.CSRF_COOKIE_NAME, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE,"
        " s.SESSION_COOKIE_DOMAIN, s.SESSION_COOKIE_PATH]",
    )

    assert values == ["__Host-sessionid", "__Host-csrftoken", True, True, None, "/"]


def test_it_keeps_plain_cookies_on_plain_http(tmp_path: Path) -> None:
    values = settings_in_subprocess(
        {"AGENTOS_DATA_DIR": str(tmp_path)}, "[s.SESSION_COOKIE_NAME, s.SESSION_COOKIE_SECURE]"
    )

    assert values == ["sessionid", False]


def test_it_keeps_one_generated_secret_key_per_data_dir(tmp_path: Path) -> None:
    first = settings_in_subprocess({"AGENTOS_DATA_DIR": str(tmp_path)}, "s.SECRET_KEY")
    second = settings_in_subprocess({"AGENTOS_DATA_DIR": str(tmp_path)}, "s.SECRET_KEY")

    assert first == second
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


def test_it_creates_the_vector_extension_by_migration(db: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()

    assert row is not None


@pytest.mark.django_db(transaction=True)
def test_it_reports_the_database_down_and_the_rest_unknown() -> None:
    original = connection.settings_dict["HOST"]
    connection.close()
    connection.settings_dict["HOST"] = "/nonexistent-socket-dir"
    try:
        report = health.check()
    finally:
        connection.close()
        connection.settings_dict["HOST"] = original

    assert report.ok is False
    assert report.database.state == "down"
    assert report.migrations.state == "unknown"
    assert report.workers.state == "unknown"


def test_makefile_names_what_to_install_without_python_312(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            "make",
            "-C",
            str(BASE_DIR),
            "PYTHON=",
            f"VENV={tmp_path}/venv",
            f"{tmp_path}/venv/bin/python",
        ],
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode != 0
    assert "Python 3.12 not found" in done.stderr
    assert "make PYTHON=/path/to/python3.12" in done.stderr
