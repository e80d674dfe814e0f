"""The one writer of `AuditEvent` rows."""

from __future__ import annotations

import getpass
import logging
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from agentos.core.models import AuditEvent

logger = logging.getLogger("agentos.core.audit")


def client_address(request: HttpRequest) -> str | None:
    # REMOTE_ADDR only: X-Forwarded-For is client-controlled unless a proxy we trust rewrites it,
    # and a spoofable address would let an attacker dodge the sign-in limiter.
    return request.META.get("REMOTE_ADDR") or None


@dataclass(frozen=True)
class Actor:
    """Who made an owner-visible change, and from where: what each action (`*/actions.py`,
    `kernel.budgets.set_global_caps`, `missions.killswitch.engage`) writes to the security log,
    so that the console, the API and a management command record the same event."""

    by: str = "owner"  # "owner", "token:<name>", or "<system user> (manage.py <command>)"
    username: str = ""  # the owner's account; empty for a command
    address: str | None = None
    path: str | None = None

    @classmethod
    def of(cls, request: HttpRequest) -> Actor:
        # With a token `request.user` is anonymous: the owner is ninja's `request.auth`.
        token = getattr(request, "api_token", None)
        owner = getattr(request, "auth", None) or request.user
        return cls(
            by=f"token:{token.name}" if token is not None else "owner",
            username=str(owner.get_username()),
            address=client_address(request),
            path=request.path,
        )

    @classmethod
    def command(cls, name: str) -> Actor:
        return cls(by=f"{getpass.getuser()} (manage.py {name})")

    @property
    def name(self) -> str:
        """Who, in one word: the account from the console, else the token or the command."""
        return self.username if self.by == "owner" and self.username else self.by


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


def record_by(kind: AuditEvent.Kind, actor: Actor, **detail: Any) -> AuditEvent:
    """Append one event of an owner's action, with its path when it came over HTTP."""
    if actor.path is not None:
        detail.setdefault("path", actor.path)
    return record(kind, username=actor.username, address=actor.address, **detail)
