"""The WebSocket at /ws/events: the owner's console (session cookie, same origin only) or a
script with an API token (`Authorization: Bearer aos_…` on the handshake, `read` scope).

A token in a header needs no origin rule: a browser page cannot set that header on a WebSocket,
so only the cookie, which a foreign page's socket would carry, is bound to our origin. When a
token is sent it alone decides; a query-string token is not taken (it would land in logs).

Server to client, one JSON object per frame, told apart by `type`:
- `{"type": "hello"}` once accepted;
- doorbells, `{"type": <what changed>}` (e.g. `"waits"`, `"health"`): look again (pages
  re-read state; the console turns each into an `agentos:<type>` DOM event);
- `{"type": "event", "number": n, "at", "kind", "mission", "run", "seq", "trust", "data",
  "wait"}`: the durable stream, after the client resumed (below); kinds in `kernel.stream`;
- `{"type": "delta", "run", "seq", "channel": "text" | "reasoning", "offset", "text"}`: model
  output while a step runs, ephemeral (never replayed; `step.completed` carries the whole
  text; `offset` is where the chunk starts in that step's text, so a gap shows);
- `{"type": "step", "run", "seq", "html"}`: after the events that changed a step of a watched
  run, that step as the run page's timeline shows it (`missions.run_views.live_steps`), for the
  page to swap in without a request;
- `{"type": "cursor", "number": n}`: to a socket that watches runs, at most every
  `CURSOR_SECONDS`, the number of the last event of the stream it went past (events of other
  runs are not sent to it): what to resume after;
- `{"type": "error", "code", "message", ...}`: the socket stays open.

Client to server: `{"type": "resume", "after": N}`, N the number of the last event it has (0
for everything), or `"after": "now"` to start at the current head. The server replays from the
database in pages, then streams each event as it is numbered: the process's tap
(`agentos.stream_tap`) numbers and reads new events for all its sockets every few
milliseconds, at once on any doorbell (the channel layer may drop those; the tap does not depend
on them), and each socket also looks every `POLL_SECONDS`. A client that reconnects with its
last number misses nothing and gets nothing twice. A later `resume` replaces the cursor.
`{"type": "watch", "runs": [id, ...]}` names the runs the page shows (at most `MAX_WATCHED`; a
later `watch` replaces the list, an empty one watches none): from then on the socket sends their
steps rendered, and of the stream only their events and those of no run (a run page needs no
other; ten runs streaming would otherwise send every tab every run's events). Errors:
`cursor_ahead` (N above the head: the client's state comes from another database, or it made N
up), `invalid_cursor`, `invalid_watch`, `invalid_message`, `unavailable` (the database did not
answer: resume again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.routing import URLRouter
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.http.request import split_domain_port, validate_host
from django.urls import path
from django.utils.http import is_same_domain
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.models import Device

from agentos import events as events_api
from agentos import stream_tap
from agentos.core import audit, tokens
from agentos.core.models import AuditEvent, Scope
from kernel import stream
from kernel.bus import OWNER_GROUP
from missions import run_views

logger = logging.getLogger(__name__)

# Close codes in the 4000-4999 private range, so the client can tell why it was refused.
CLOSE_UNAUTHENTICATED = 4401
# How often an open stream looks for newly numbered events without being woken (the tap wakes it
# far sooner), and how many events it reads per query while replaying.
POLL_SECONDS = 0.25
PAGE_SIZE = stream_tap.PAGE_SIZE
# Runs one socket may watch (`watch`): a page shows one run, a few at most.
MAX_WATCHED = 20
# How often a socket that watches runs is told how far the stream went past its events.
CURSOR_SECONDS = 1.0


def _address(scope: dict[str, Any]) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, lower-cased with its default port; None if malformed."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def _served_scheme(scope: dict[str, Any], headers: dict[bytes, bytes]) -> str:
    """http or https, as the browser sees us: TLS ended here (wss), or at a proxy we trust
    through SECURE_PROXY_SSL_HEADER, exactly as Django decides `request.is_secure()`."""
    if scope.get("scheme") in ("wss", "https"):
        return "https"
    proxy_header: tuple[str, str] | None = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, secure_value = proxy_header
        header = name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin1")
        sent = headers.get(header, b"").decode("latin1").split(",")[0].strip()
        if sent == secure_value:
            return "https"
    return "http"


def origin_allowed(scope: dict[str, Any]) -> bool:
    """The `Origin` matches, on scheme, host and port, the origins CSRF trusts: this server's
    own (scheme://Host, Host being one of ALLOWED_HOSTS) or one of CSRF_TRUSTED_ORIGINS.

    Host names alone are not enough: a page on http://localhost:3000 (any local dev server)
    would otherwise open the owner's stream with the owner's cookie.
    """
    headers = dict(scope.get("headers", []))
    sent = headers.get(b"origin", b"").decode("latin1")
    origin = _origin(sent)
    if origin is None:
        return False
    host = headers.get(b"host", b"").decode("latin1")
    domain, _port = split_domain_port(host)
    # A rebound DNS name gives a foreign page our address, but never one of our host names.
    ours = domain and validate_host(domain, settings.ALLOWED_HOSTS)
    if ours and origin == _origin(f"{_served_scheme(scope, headers)}://{host}"):
        return True
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        scheme, _sep, netloc = trusted.partition("://")
        if netloc.startswith("*."):
            # Django's wildcard form: any subdomain, same scheme (and the port as written).
            wanted = netloc[1:].lower()
            if origin[0] == scheme.lower() and is_same_domain(urlsplit(sent).netloc, wanted):
                return True
        elif origin == _origin(trusted):
            return True
    return False


class AuditedOriginValidator:
    """Refuse a WebSocket whose origin is not ours (`origin_allowed`), auditing each refusal."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if bearer_token(scope) is not None or origin_allowed(scope):
            return await self.application(scope, receive, send)
        raw = dict(scope.get("headers", [])).get(b"origin")
        await database_sync_to_async(audit.record)(
            AuditEvent.Kind.WEBSOCKET_REFUSED,
            address=_address(scope),
            reason="foreign_origin" if raw else "no_origin",
            origin=(raw or b"").decode("latin1")[:200],
        )
        return await WebsocketDenier()(scope, receive, send)


def bearer_token(scope: dict[str, Any]) -> str | None:
    """The API token of an `Authorization: Bearer …` header, if the handshake has one."""
    sent = dict(scope.get("headers", [])).get(b"authorization", b"").decode("latin1")
    scheme, _sep, secret = sent.partition(" ")
    return secret.strip() or None if scheme.lower() == "bearer" else None


@database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no type hints
def _token_refusal(scope: dict[str, Any], secret: str) -> str | None:
    """Why this token may not open the stream (`invalid_token`, `missing_scope`), or None."""
    address = _address(scope)
    try:
        token = tokens.authenticate_token(secret, address=address)
    except tokens.TokenRefused:
        return "invalid_token"  # audited by authenticate_token, with its precise reason
    if Scope.READ not in token.scopes:
        return "missing_scope"
    return None


@database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no type hints
def _is_verified_owner(scope: dict[str, Any]) -> bool:
    user = scope.get("user")
    if user is None or not user.is_authenticated or not user.is_active or not user.is_superuser:
        return False
    device_id = scope["session"].get(DEVICE_ID_SESSION_KEY)
    device = Device.from_persistent_id(device_id) if device_id else None
    return device is not None and device.user_id == user.pk


class EventsConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels has no hints
    cursor: int = 0
    told: int = 0  # the number of the last event sent, or cursor message
    told_at: float = 0.0
    pump: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        secret = bearer_token(self.scope)
        if secret is not None:
            refusal = await _token_refusal(self.scope, secret)
        elif not await _is_verified_owner(self.scope):
            refusal = "unauthenticated"
        else:
            refusal = None
        if refusal is not None:
            await database_sync_to_async(audit.record)(
                AuditEvent.Kind.WEBSOCKET_REFUSED, address=_address(self.scope), reason=refusal
            )
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.wake = asyncio.Event()
        self.watching: frozenset[int] = frozenset()
        self.tap = stream_tap.tap()
        await self.channel_layer.group_add(OWNER_GROUP, self.channel_name)
        await self.accept()
        self.tap.join(self)
        await self.send_json({"type": "hello"})

    async def disconnect(self, code: int) -> None:
        await self._stop_pump()
        if hasattr(self, "tap"):  # refused sockets never joined it
            await self.tap.leave(self)
        await self.channel_layer.group_discard(OWNER_GROUP, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Channels would let a malformed frame end the connection; answer it instead.
        try:
            content = json.loads(text_data) if text_data else None
        except ValueError:
            content = None
        if not isinstance(content, dict):
            await self._error("invalid_message", "Send one JSON object per frame.")
            return
        await self.receive_json(content)

    async def receive_json(self, content: dict[str, Any], **kwargs: Any) -> None:
        if content.get("type") == "watch":
            await self._watch(content.get("runs"))
            return
        if content.get("type") != "resume":
            await self._error("invalid_message", "A client sends 'resume' or 'watch'.")
            return
        # The old cursor's pump stops first: nothing from it arrives after the new cursor.
        await self._stop_pump()
        after: Any = content.get("after")
        cursor_given = isinstance(after, int) and not isinstance(after, bool) and after >= 0
        if after != "now" and not cursor_given:
            await self._error(
                "invalid_cursor",
                "'after' is the number of the last event you have (0 for all) or 'now'.",
            )
            return
        try:
            head = await _current_head()
        except Exception:
            logger.exception("event stream: reading the head failed")
            await self._error("unavailable", "The event stream is unavailable; resume again.")
            return
        if after == "now":
            self.cursor = head
        elif after > head:
            await self._error(
                "cursor_ahead",
                f"Event {after} does not exist yet; the last one is {head}.",
                head=head,
            )
            return
        else:
            self.cursor = after
        self.told = self.cursor
        self.pump = asyncio.create_task(self._stream())

    async def _stream(self) -> None:
        """1. take the events after the cursor from the process's tap (`agentos.stream_tap`),
        else read the next page from the database (numbering new events first when the last
        page was not full); 2. send them, moving the cursor, with the steps of watched runs as
        the timeline shows them; 3. when caught up, sleep until the tap or a doorbell wakes it,
        or the next poll."""
        full = False
        while True:
            framed = self.tap.after(self.cursor, PAGE_SIZE)
            if framed is not None:
                # From the tap's window: encoded once for every socket.
                for event, frame in framed:
                    if self._wants(event):
                        await self.send(text_data=frame)
                        self.told = event["number"]
                    self.cursor = event["number"]
                steps = self.tap.steps_after(framed, self.watching)
                count = len(framed)
            else:
                try:
                    events = await _next_page(self.cursor, sequence=not full)
                except Exception:
                    # The database is away (restart, failover): keep the socket, try again.
                    logger.exception("event stream: reading events failed")
                    events = []
                for event in events:
                    if self._wants(event):
                        await self.send_json({"type": "event", **events_api.wire(event)})
                        self.told = event["number"]
                    self.cursor = event["number"]
                steps = await self._render_steps(events)
                count = len(events)
            for shown in steps:
                await self.send(text_data=shown.frame)
            full = count == PAGE_SIZE
            if full:
                continue
            await self._tell_cursor()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POLL_SECONDS)
            self.wake.clear()

    def _wants(self, event: stream.StreamEvent) -> bool:
        """Every event, unless the page watches runs: then theirs and those of no run."""
        return not self.watching or event["run"] is None or event["run"] in self.watching

    async def _tell_cursor(self) -> None:
        """Past events it was not sent (of runs it does not watch), at most every
        `CURSOR_SECONDS`: where to resume, so that a reconnect does not page through them."""
        now = asyncio.get_running_loop().time()
        if self.told < self.cursor and now - self.told_at >= CURSOR_SECONDS:
            await self.send_json({"type": "cursor", "number": self.cursor})
            self.told, self.told_at = self.cursor, now

    async def _render_steps(self, events: list[stream.StreamEvent]) -> list[stream_tap.Shown]:
        """The steps of watched runs these events changed (read from the database, not from the
        tap), each once, as the run page shows them now: never older than the event, which was
        numbered after its commit."""
        wanted = list(
            dict.fromkeys(
                (event["run"], event["seq"])
                for event in events
                if event["kind"].startswith("step.")
                and event["run"] in self.watching
                and event["seq"] is not None
            )
        )
        if not wanted:
            return []
        try:
            shown = await _live_steps(wanted)
        except Exception:
            # The events went out: the page refreshes its timeline from them.
            logger.exception("event stream: rendering steps failed")
            return []
        return [
            stream_tap.Shown(self.cursor, run_id, seq, stream_tap.step_frame(run_id, seq, html))
            for run_id, seq, html in shown
        ]

    async def _watch(self, runs: Any) -> None:
        valid = (
            isinstance(runs, list)
            and len(runs) <= MAX_WATCHED
            and all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in runs)
        )
        if not valid:
            await self._error(
                "invalid_watch", f"'runs' is a list of at most {MAX_WATCHED} run ids."
            )
            return
        self.watching = frozenset(runs)
        self.tap.watch_changed()

    async def _stop_pump(self) -> None:
        if self.pump is not None:
            self.pump.cancel()
            # A pump that already failed (the client went away mid-send) has nothing to add.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pump
            self.pump = None

    async def _error(self, code: str, message: str, **details: Any) -> None:
        await self.send_json({"type": "error", "code": code, "message": message, **details})

    async def doorbell(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": event["kind"]})
        # Something changed: the stream looks now rather than at its next tick.
        self.tap.ring()
        if self.pump is not None:
            self.wake.set()

    async def delta(self, event: dict[str, Any]) -> None:
        await self.send_json(event)

    @classmethod
    async def encode_json(cls, content: dict[str, Any]) -> str:
        return json.dumps(content, cls=DjangoJSONEncoder)


@database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no type hints
def _current_head() -> int:
    stream.sequence()
    return stream.head()


@database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no type hints
def _live_steps(wanted: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    return run_views.live_steps(wanted)


@database_sync_to_async  # type: ignore[untyped-decorator]  # channels ships no type hints
def _next_page(after: int, *, sequence: bool) -> list[stream.StreamEvent]:
    if sequence:
        stream.sequence()
    return stream.page(after, PAGE_SIZE)


def websocket_application() -> Any:
    return AuditedOriginValidator(
        AuthMiddlewareStack(URLRouter([path("ws/events", EventsConsumer.as_asgi())]))
    )
