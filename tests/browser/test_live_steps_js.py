"""static/console.js swapping in the steps a run page watches, pushed rendered on the socket
(`step` messages), against a scripted WebSocket server (no stack): it names the runs it shows,
puts each step in seq order, never takes one back to under way, and puts back what a refresh
of the timeline rendered before it would have lost."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.test_console_js import ORIGIN, STATIC, Server, in_page, said_hello
from tests.polling import wait_for

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><html><head>
<script src="/static/vendor/htmx.min.js" defer></script>
<script src="/static/console.js" defer></script>
</head><body data-ws-url="/ws/events">
<section class="card" id="timeline" data-watch-run="7"><ol class="timeline">
<li class="step" id="step-1" data-seq="1">one</li>
<li class="step" id="step-3" data-seq="3">three</li>
</ol></section>
</body></html>"""


def step(seq: int, text: str, *, open_: bool = False) -> str:
    state = " step-open" if open_ else ""
    return f'<li class="step{state}" id="step-{seq}" data-seq="{seq}">{text}</li>'


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
    page.goto(f"{ORIGIN}/runs/7/")
    return fake


def steps(page: Page) -> list[str]:
    shown: list[str] = page.locator("#timeline li.step").evaluate_all(
        "(items) => items.map((li) => li.id + (li.classList.contains('step-open') ? ' open' : ''))"
    )
    return shown


def shows(page: Page, expected: list[str]) -> None:
    wait_for(
        lambda: steps(page) == expected,
        timeout=10,
        message=f"the timeline to show {expected}",
        pause=in_page(page),
    )


def test_it_watches_the_runs_its_page_shows(page: Page, server: Server) -> None:
    said_hello(page, server)
    wait_for(
        lambda: len(server.received) == 2,
        timeout=10,
        message="the page to name its run",
        pause=in_page(page),
    )

    assert server.received == [
        {"type": "resume", "after": "now"},
        {"type": "watch", "runs": [7]},
    ]


def test_it_swaps_steps_in_by_seq_and_never_back(page: Page, server: Server) -> None:
    said_hello(page, server)

    server.send(type="step", run=7, seq=4, html=step(4, "four", open_=True))
    server.send(type="step", run=7, seq=2, html=step(2, "two"))
    shows(page, ["step-1", "step-2", "step-3", "step-4 open"])
    server.send(type="step", run=7, seq=4, html=step(4, "four, done"))
    shows(page, ["step-1", "step-2", "step-3", "step-4"])
    server.send(type="step", run=7, seq=4, html=step(4, "four again", open_=True))  # stale
    server.send(type="step", run=8, seq=5, html=step(5, "another run's"))
    server.send(type="step", run=7, seq=6, html=step(6, "six"))
    shows(page, ["step-1", "step-2", "step-3", "step-4", "step-6"])

    expect(page.locator("#step-4")).to_have_text("four, done")


def test_it_puts_back_what_a_stale_refresh_lost(page: Page, server: Server) -> None:
    said_hello(page, server)
    server.send(type="step", run=7, seq=4, html=step(4, "four"))
    shows(page, ["step-1", "step-3", "step-4"])

    # A refresh rendered before step 4, and before step 3 was done, lands after it.
    page.evaluate(
        """(html) => htmx.swap(document.querySelector("#timeline"), html,
            {swapStyle: "outerHTML", swapDelay: 0, settleDelay: 0})""",
        '<section class="card" id="timeline" data-watch-run="7"><ol class="timeline">'
        + step(1, "one")
        + step(3, "three", open_=True)
        + "</ol></section>",
    )

    shows(page, ["step-1", "step-3 open", "step-4"])


def test_it_resumes_after_where_the_stream_went_past_its_runs(page: Page, server: Server) -> None:
    """A watching page is sent only its runs' events; a reconnect resumes after the number the
    server last told it, not after its own run's last event."""
    said_hello(page, server)
    server.send(type="event", number=41, kind="step.completed", run=7, mission=3, seq=2, data={})
    server.send(type="cursor", number=90)
    server.send(type="step", run=7, seq=5, html=step(5, "five"))  # once the cursor is taken
    shows(page, ["step-1", "step-3", "step-5"])

    server.sockets[-1].close()

    wait_for(
        lambda: len(server.sockets) == 2 and len(server.received) == 4,
        timeout=10,
        message="the page to reconnect, resume and watch",
        pause=in_page(page),
    )
    assert server.received[2:] == [
        {"type": "resume", "after": 90},
        {"type": "watch", "runs": [7]},
    ]
