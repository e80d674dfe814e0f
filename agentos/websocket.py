"""The console's WebSocket: owner-only, same-origin only, a doorbell for live pages.

The durable event stream (resumable by cursor) arrives with the console issue; today the socket
carries doorbells (`{"type": "health"}`) that tell open pages to re-read state.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.security.websocket import OriginValidator, WebsocketDenier
from django.conf import settings
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.models import Device

from agentos import audit
from agentos.models import AuditEvent
from kernel.bus import OWNER_GROUP

logger = logging.getLogger(__name__)

# Close codes in the 4000-4999 private range, so the client can tell why it was refused.
CLOSE_UNAUTHENTICATED = 4401


def _address(scope: dict[str, Any]) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


class AuditedOriginValidator(OriginValidator):  # type: ignore[misc]  # channels has no hints
    """Channels' origin check, with each refusal written to the audit log."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        raw = dict(scope.get("headers", [])).get(b"origin")
        parsed = urlparse(raw.decode("latin1")) if raw else None
        if self.valid_origin(parsed):
            return await self.application(scope, receive, send)
        await database_sync_to_async(audit.record)(
            AuditEvent.Kind.WEBSOCKET_REFUSED,
            address=_address(scope),
            reason="foreign_origin" if raw else "no_origin",
            origin=(raw or b"").decode("latin1")[:200],
        )
        return await WebsocketDenier()(scope, receive, send)


def allowed_origins() -> list[str]:
    return [*settings.ALLOWED_HOSTS, *settings.CSRF_TRUSTED_ORIGINS]


@database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no type hints
def _is_verified_owner(scope: dict[str, Any]) -> bool:
    user = scope.get("user")
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    device_id = scope["session"].get(DEVICE_ID_SESSION_KEY)
    device = Device.from_persistent_id(device_id) if device_id else None
    return device is not None and device.user_id == user.pk


class EventsConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels has no hints
    async def connect(self) -> None:
        if not await _is_verified_owner(self.scope):
            await database_sync_to_async(audit.record)(
                AuditEvent.Kind.WEBSOCKET_REFUSED,
                address=_address(self.scope),
                reason="unauthenticated",
            )
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(OWNER_GROUP, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello"})

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(OWNER_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # Clients only listen for now; anything they send is ignored.
        return None

    async def doorbell(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": event["kind"]})


def websocket_application() -> Any:
    from channels.routing import URLRouter
    from django.urls import path

    return AuditedOriginValidator(
        AuthMiddlewareStack(URLRouter([path("ws/events", EventsConsumer.as_asgi())])),
        allowed_origins(),
    )
