"""ASGI entry point for daphne: HTTP through Django, WebSocket through Channels."""

from __future__ import annotations

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos.settings")

# Django must be set up before anything imports models (the WebSocket stack does).
django_asgi_app = get_asgi_application()

from agentos.websocket import websocket_application  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_application()})
