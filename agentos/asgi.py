"""ASGI entry point for daphne: HTTP through Django, WebSocket through Channels, and A2A's two
paths (the agent card, JSON-RPC) through the A2A SDK's Starlette pieces (`agentos.a2a`)."""

from __future__ import annotations

import os
from http import HTTPStatus
from typing import Any

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application
from twisted.web import http as twisted_http

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos.settings")

# Django must be set up before anything imports models (the WebSocket stack does).
django_asgi_app = get_asgi_application()

from agentos import a2a  # noqa: E402
from agentos.websocket import websocket_application  # noqa: E402
from kernel import bus  # noqa: E402

# ASGI carries a status code without its reason phrase, and daphne takes the phrase from
# Twisted's table, which lacks some the API answers (422, 429, 507): their status line would say
# "Unknown Status". The standard library's phrases (Django's too) fill the gaps.
for _status in HTTPStatus:
    twisted_http.RESPONSES.setdefault(_status.value, _status.phrase.encode())

router = ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_application()})


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    # The server's loop is the process's loop for the channel layer (see `kernel.bus`).
    bus.adopt_running_loop()
    if scope["type"] == "http" and a2a.serves(scope["path"]):
        await a2a.application(scope, receive, send)
        return
    await router(scope, receive, send)
