"""The one writer of `AuditEvent` rows."""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest

from agentos.models import AuditEvent

logger = logging.getLogger("agentos.audit")


def client_address(request: HttpRequest) -> str | None:
    # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless a proxy we trust rewrites it,
    # and a spoofable address would let an attacker dodge the sign-in limiter.
    return request.META.get("REMOTE_ADDR") or None


def record(
    kind: AuditEvent.Kind,
    *,
    username: str = "",
    address: str | None = None,
    **detail: Any,
) -> AuditEvent:
    """Append one event. Callers pass facts only: never a password, token or code."""
    event = AuditEvent.objects.create(
        kind=kind, username=username[:150], address=address, detail=detail
    )
    logger.info("%s user=%r address=%s %s", kind.value, username, address, detail or "")
    return event


def record_request(
    kind: AuditEvent.Kind, request: HttpRequest, *, username: str = "", **detail: Any
) -> AuditEvent:
    detail.setdefault("path", request.path)
    return record(kind, username=username, address=client_address(request), **detail)


def provider_changed(request: HttpRequest, provider: str, change: str) -> AuditEvent:
    """A provider's key set or forgotten, its endpoint set or removed — by whom, never what."""
    from agentos import tokens  # tokens records through this module: imported when called

    return record_request(
        AuditEvent.Kind.PROVIDER_CHANGED,
        request,
        username=request.user.get_username(),
        provider=provider,
        change=change,
        by=tokens.actor(request),
    )
