"""System checks for misconfiguration, with stable ids (agentos.E0xx errors, W0xx warnings)."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.utils import DatabaseError

from agentos.backups.schedule import PASSPHRASE_ENV
from agentos.backups.sealed import MIN_PASSPHRASE
from agentos.core import vault
from kernel.telemetry import EXPORTERS

MIN_POSTGRES = 160000


@register(Tags.security)
def check_https(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    if settings.HTTPS and not settings.SESSION_COOKIE_NAME.startswith("__Host-"):
        messages.append(
            Error(
                "AGENTOS_HTTPS is on but the session cookie lacks the __Host- prefix.",
                id="agentos.E001",
            )
        )
    for origin in settings.CSRF_TRUSTED_ORIGINS:
        if not origin.startswith(("https://", "http://")):
            messages.append(
                Error(
                    f"AGENTOS_TRUSTED_ORIGINS entry {origin!r} needs a scheme (https://host).",
                    id="agentos.E002",
                )
            )
    if settings.DEBUG:
        messages.append(
            Warning("AGENTOS_DEBUG is on: error pages show internals.", id="agentos.W001")
        )
    return messages


@register(Tags.security)
def check_vault(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Vault keys that cannot be used (malformed, or a key file others could read) fail at
    start-up rather than when a provider key is first needed."""
    try:
        vault.check()
    except ImproperlyConfigured as error:
        return [Error(str(error), id="agentos.E020")]
    return []


@register()
def check_settings(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    if not settings.ALLOWED_HOSTS:
        messages.append(
            Error(
                "AGENTOS_ALLOWED_HOSTS is empty: every request would be refused.", id="agentos.E003"
            )
        )
    if not isinstance(settings.HUEY.get("immediate"), bool):
        messages.append(
            Error("HUEY['immediate'] must be set explicitly to True or False.", id="agentos.E004")
        )
    if "default" not in settings.CHANNEL_LAYERS:
        messages.append(Error("CHANNEL_LAYERS has no default layer.", id="agentos.E005"))
    elif "TIME_ZONE" not in settings.CHANNEL_LAYERS["default"].get("CONFIG", {"TIME_ZONE": 0}):
        # Without it channels-postgres fails to build and channels silently returns no layer.
        messages.append(
            Error("The channels-postgres layer CONFIG needs a TIME_ZONE key.", id="agentos.E006")
        )
    if settings.OTEL_EXPORTER not in EXPORTERS:
        messages.append(
            Error(
                f"AGENTOS_OTEL_EXPORTER is {settings.OTEL_EXPORTER!r}; expected one of"
                f" {', '.join(EXPORTERS)}.",
                id="agentos.E007",
            )
        )
    return messages


@register(Tags.database)
def check_database(app_configs: Any, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Runs with `check --database default` and before `migrate`."""
    if not databases or "default" not in databases:
        return []
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SHOW server_version_num")
            (version,) = cursor.fetchone() or (0,)
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            has_vector = cursor.fetchone() is not None
    except DatabaseError as error:
        return [Error(f"Cannot reach the database: {error}", id="agentos.E010")]
    messages: list[CheckMessage] = []
    if int(version) < MIN_POSTGRES:
        messages.append(
            Error(f"PostgreSQL 16 or newer is required (server is {version}).", id="agentos.E011")
        )
    if not has_vector:
        messages.append(
            Error(
                "The pgvector extension is not installed on this PostgreSQL server.",
                hint="Install pgvector, or unset DATABASE_URL to use the embedded server.",
                id="agentos.E012",
            )
        )
    return messages


@register()
def check_backups(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """The nightly backup turned on without a usable passphrase would fail every night."""
    if not settings.BACKUP_NIGHTLY:
        return []
    passphrase = os.environ.get(PASSPHRASE_ENV, "")
    if len(passphrase) < MIN_PASSPHRASE:
        return [
            Warning(
                f"AGENTOS_BACKUP_NIGHTLY is on but {PASSPHRASE_ENV} is "
                + ("not set" if not passphrase else f"shorter than {MIN_PASSPHRASE} characters")
                + ": the nightly backup will fail (docs/operations.md).",
                id="agentos.W030",
            )
        ]
    return []
