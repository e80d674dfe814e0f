"""static/console.js in Chromium against a scripted WebSocket server (no stack): it resumes the
event stream after `hello` (and after its last event on a reconnect), turns stream events into
`agentos:run-<id>` / `agentos:mission-<id>` / `agentos:runs` DOM events once each, appends model
deltas as text, and still turns plain doorbells into `agentos:<kind>` events."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Route, WebSocketRoute, expect

from tests.polling import wait_for

pytestmark = pytest.mark.browser

STATIC = Path(__file__).resolve().parents[2] / "static"
ORIGIN = "http://console.test"
PAGE = """<!doctype html><html><head>
<script src="/static/vendor/htmx.min.js" defer></script>
<script src="/static/console.js" defer></script>
</head><body data-ws-url="/ws/events">
<span class="live-dot"></span>
<p id="text" data-delta-for="7" data-delta-seq="3" data-delta-channel="text"></p>
<p id="reasoning" data-delta-for="7" data-delta-seq="3" data-delta-channel="reasoning"></p>
<p id="other-run" data-delta-for="8" data-delta-seq="3" data-delta-channel="text"></p>
</body></html>"""
WATCHED = [
    "agentos:run-7",
    "agentos:mission-3",
    "agentos:runs",
    "agentos:waits",
    "agentos:health",
    "agentos:delta-7",
]


class Server:
    """The socket's server side: what the page sent, and a way to send to it."""

    def __init__(self) -> None:
        self.sockets: list[WebSocketRoute] = []
        self.received: list[dict[str, Any]] = []

    def connect(self, socket: WebSocketRoute) -> None:
        self.sockets.append(socket)
        socket.on_message(lambda message: self.received.append(json.loads(message)))
        socket.send(json.dumps({"type": "hello"}))

    def send(self, **message: Any) -> None:
        self.sockets[-1].send(json.dumps(message))


def in_page(page: Page) -> Callable[[float], None]:
    """A pause that lets the page's event loop run (Playwright dispatches socket callbacks
    meanwhile; a plain sleep would block them)."""
    return lambda seconds: page.wait_for_timeout(seconds * 1000)


def said_hello(page: Page, server: Server) -> None:
    wait_for(
        lambda: server.received,
        timeout=10,
        message="the page to ask where to resume",
        pause=in_page(page),
    )


@pytest.fixture
def server(page: Page) -> Server:
    def serve(route: Route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path.startswith("/static/"):
            body = (STATIC / path.removeprefix("/static/")).read_text()
            route.fulfill(body=body, content_type="text/javascript")
        else:
            route.fulfill(body=PAGE, content_type="text/html")

    fake = Server()
    page.route(f"{ORIGIN}/**", serve)
    page.route_web_socket("ws://console.test/ws/events", fake.connect)
    page.goto(f"{ORIGIN}/run")
    page.evaluate(
        """(names) => {
            window.seen = [];
            for (const name of names) {
                document.body.addEventListener(name, (e) => window.seen.push([name, e.detail]));
            }
        }""",
        WATCHED,
    )
    return fake


def seen(page: Page) -> list[list[Any]]:
    return page.evaluate("() => window.seen")  # type: ignore[no-any-return]


def names(page: Page) -> list[str]:
    return [name for name, _ in seen(page)]


def test_it_resumes_from_now_after_hello(page: Page, server: Server) -> None:
    said_hello(page, server)

    assert server.received == [{"type": "resume", "after": "now"}]
    expect(page.locator(".live-dot")).to_have_class("live-dot is-live")


def test_it_dispatches_each_stream_event_once_for_its_run_and_mission(
    page: Page, server: Server
) -> None:
    said_hello(page, server)
    event = {"type": "event", "number": 5, "kind": "step.completed", "run": 7, "mission": 3}

    server.send(**event, seq=2, data={})
    server.send(**event, seq=2, data={})  # a repeat (number 5 again) is dropped
    server.send(type="event", number=6, kind="owner.message", run=7, mission=None, data={})

    wait_for(
        lambda: names(page).count("agentos:run-7") == 2,
        timeout=10,
        message="the second event of run 7",
        pause=in_page(page),
    )
    assert names(page) == ["agentos:run-7", "agentos:mission-3", "agentos:runs", "agentos:run-7"]


def test_it_appends_model_deltas_as_text(page: Page, server: Server) -> None:
    said_hello(page, server)

    server.send(type="delta", run=7, seq=3, channel="text", offset=0, text="Hel")
    server.send(type="delta", run=7, seq=3, channel="text", offset=0, text="Hel")  # a repeat
    server.send(type="delta", run=7, seq=3, channel="text", offset=3, text="lo <b>x</b>")
    server.send(type="delta", run=7, seq=3, channel="reasoning", offset=0, text="Thinking")
    server.send(type="delta", run=7, seq=4, channel="text", offset=0, text="later step")

    expect(page.locator("#text")).to_have_text("Hello <b>x</b>")  # text, never markup
    expect(page.locator("#reasoning")).to_have_text("Thinking")
    expect(page.locator("#other-run")).to_have_text("")
    assert page.locator("#text b").count() == 0
    wait_for(
        lambda: names(page).count("agentos:delta-7") == 5,
        timeout=10,
        message="the five delta events of run 7",
        pause=in_page(page),
    )
    name, detail = seen(page)[0]
    assert name == "agentos:delta-7"
    assert {key: detail[key] for key in ("text", "seq", "channel", "offset")} == {
        "text": "Hel",
        "seq": 3,
        "channel": "text",
        "offset": 0,
    }


def test_it_marks_a_missed_beginning(page: Page, server: Server) -> None:
    said_hello(page, server)

    server.send(type="delta", run=7, seq=3, channel="text", offset=40, text="the end")

    expect(page.locator("#text")).to_have_text("… the end")


def test_it_still_turns_doorbells_into_events(page: Page, server: Server) -> None:
    said_hello(page, server)

    server.send(type="waits")
    server.send(type="doorbell", kind="health")

    wait_for(
        lambda: len(seen(page)) == 2,
        timeout=10,
        message="both doorbells' events",
        pause=in_page(page),
    )
    assert names(page) == ["agentos:waits", "agentos:health"]


def test_it_resumes_after_its_last_event_when_it_reconnects(page: Page, server: Server) -> None:
    said_hello(page, server)
    server.send(type="event", number=41, kind="run.waiting", run=7, mission=3, data={})
    wait_for(
        lambda: seen(page),
        timeout=10,
        message="the event to reach the page",
        pause=in_page(page),
    )

    server.sockets[-1].close()

    wait_for(
        lambda: len(server.sockets) == 2 and len(server.received) == 2,
        timeout=10,
        message="the page to reconnect and resume",
        pause=in_page(page),
    )
    assert server.received[-1] == {"type": "resume", "after": 41}


def test_it_starts_again_from_now_when_its_cursor_is_ahead(page: Page, server: Server) -> None:
    said_hello(page, server)
    server.send(type="event", number=41, kind="run.waiting", run=7, mission=3, data={})
    server.send(type="error", code="cursor_ahead", message="Event 41 does not exist yet.")

    wait_for(
        lambda: len(server.received) == 2,
        timeout=10,
        message="the page to resume again",
        pause=in_page(page),
    )
    assert server.received[-1] == {"type": "resume", "after": "now"}
