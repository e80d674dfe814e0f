"""`web_fetch` with `render`: a page whose text its script writes, served by a real HTTP server on
127.0.0.1, read by the node's Chromium inside a real level-2 VM (QEMU, under TCG on the test
machines) through the real egress service, then by the quarantined reader on the offline
scripted model, inside a real in-process worker. One VM boots for the whole module (a first
Chromium start in it took 26 s under TCG): the run's steps are then asserted one part at a time.
Then a run's second page, read by the Chromium its first started, in the same VM.
"""

from __future__ import annotations

import json
import platform
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cluster import browser, dispatch, egress, nodes, warm
from cluster.runner import vm, vmpool
from kernel import exposure, runs
from kernel.models import Event, Run, RunStatus, Step
from kernel.worker import Worker
from missions import web, web_pages
from tests.cluster.egress_fixtures import egress_dir, service  # noqa: F401  # fixtures
from tests.kernel.factories import make_mission

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64",
        reason="level 2 is QEMU on x86-64 Linux",
    ),
    pytest.mark.django_db(transaction=True),
    # A boot and Chromium's first start under TCG: 30 to 60 s measured on the 2-core test
    # machine, more when it is loaded; below the browser's own wall clock (cluster/browser.py).
    pytest.mark.timeout(300),
]

FACT = "Version 4.2 was released on 3 March by the build script."
# Nothing of the fact is in the HTML: the script asks the server for it and writes it.
PAGE = """<!doctype html><html><head><title>Release notes</title></head>
<body><h1 id="title"></h1><p id="fact"></p>
<script>
document.getElementById("title").textContent = "Release " + (4.2).toFixed(1);
fetch("/fact.txt").then(r => r.text()).then(t => {
  document.getElementById("fact").textContent = t.trim();
});
fetch("/private").catch(() => null);  // a site asking for credentials gets none
</script></body></html>"""
FACTS = {
    "facts": [
        {"fact": "4.2 came out on 3 March.", "quote": FACT, "url": "x"},
        {"fact": "Not on the page.", "quote": "Version 4.2 was never released at all"},
    ]
}


class Site:
    """The page and the fact its script asks for, on 127.0.0.1; who asked for what."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.headers: list[dict[str, str]] = []
        hits, headers = self.hits, self.headers

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # the stdlib's naming
                hits.append(self.path)
                headers.append({k.lower(): v for k, v in self.headers.items()})
                kind, body = {
                    "/page": ("text/html; charset=utf-8", PAGE),
                    "/fact.txt": ("text/plain", FACT + "\n"),
                }.get(self.path, ("text/plain", "missing"))
                if self.path == "/private":
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="site"')
                else:
                    self.send_response(200 if body != "missing" else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    server = Site()
    yield server
    server.close()


def start(turns: list[dict[str, Any]], site: Site) -> Run:
    given: dict[str, Any] = {
        "goal": "Find out when 4.2 was released.",
        "provider": "scripted",
        "model": "scripted",
        "tools": ["web_fetch"],
        "script": {
            "turns": turns,
            "children": {"reader": {"turns": [{"text": json.dumps(FACTS)}]}},
        },
        "data_framing": True,
        "allowed_hosts": [f"127.0.0.1:{site.port}"],
    }
    return runs.start_run(account=make_mission(), program="agent", input=given)


def calling(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"text": "Calling.", "tool_calls": [{"name": "web_fetch", "arguments": arguments}]}


@pytest.mark.usefixtures("service")
def test_a_script_built_page_is_read_through_the_vm_s_browser_and_the_reader(site: Site) -> None:
    assert vm.available()[0], vm.available()[1]
    url = f"{site.url}/page"
    run = start(
        [
            calling({"url": url, "question": "When was 4.2 released?", "render": True}),
            {"echo_context": True},
        ],
        site,
    )
    # Fetched plainly, the page has no fact: its text is written by its script.
    plain = web_pages.fetch(run.pk, url)
    assert FACT not in plain.text
    assert "Release 4.2" not in plain.text

    Worker(lease_seconds=300).run_until_idle()

    run.refresh_from_db()
    assert run.status == RunStatus.DONE, run.output
    (called,) = Step.objects.filter(run=run, kind="tool_call", name="web_fetch")
    assert isinstance(called.result, dict)
    assert called.result["is_error"] is False, called.result
    got = json.loads(called.result["output"])
    # The quote was found in the rendered page's text (a quote not in it is dropped).
    assert got["answer"] == {
        "facts": [{"fact": "4.2 came out on 3 March.", "quote": FACT, "url": url}]
    }
    assert got["dropped"] == 1
    page_step = Step.objects.get(run=run, name="web-fetch-page")
    assert page_step.request == {"url": url, "render": True}
    # The reader had the rendered page, as the Web's data, and no tools.
    reader = Run.objects.get(parent=run)
    assert reader.input["tools"] == []
    goal = reader.input["goal"]
    assert 'trust="web"' in goal
    assert FACT in goal
    assert "Release 4.2" in goal
    # The acting agent saw the reader's answer framed as Web data, never the page.
    last = Step.objects.filter(run=run, kind="model_call").order_by("-seq").first()
    assert last is not None
    assert isinstance(last.result, dict)
    seen = str(last.result["text"])
    assert 'source=\\"tool web_fetch\\" trust=\\"web\\"' in seen
    assert "Release notes" not in seen
    # The browser's requests, the page and the one its script made, went through the run's
    # egress with the token the browser answered the proxy's challenge with; the site never
    # saw the token.
    assert site.hits.count("/page") == 2  # the plain fetch, then the browser
    assert "/fact.txt" in site.hits
    allowed = Event.objects.filter(run=run, kind="egress.allowed")
    assert allowed.count() >= 3
    assert {(event.data["host"], event.data["port"]) for event in allowed} == {
        ("127.0.0.1", site.port)
    }
    # Chromium's own requests (time queries, search preconnects, updates) were not even asked
    # for; its account check and push check-in were, of names no egress resolves.
    asked = Event.objects.filter(run=run, kind__startswith="egress.")
    assert {event.data["host"] for event in asked} <= {"127.0.0.1", "gaia.invalid", "gcm.invalid"}
    assert "/private" in site.hits
    for headers in site.headers:
        assert "proxy-authorization" not in headers
        assert "authorization" not in headers
    assert exposure.of_tree(run.pk).flags[exposure.UNTRUSTED]["by"].startswith("web_fetch")
    assert web.WEB_FETCH.input_schema["properties"]["render"] == {"type": "boolean"}
    # The run's end released its browser VM (the run itself is at level 1).
    live = [entry["key"] for entry in vmpool.vms(nodes.local_state())]
    assert warm.browser_key(run.pk) not in live


@pytest.mark.usefixtures("service")
def test_a_host_the_policy_refuses_is_not_rendered(site: Site) -> None:
    other = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = other.server_address[1]
    other.server_close()
    url = f"http://127.0.0.1:{port}/page"
    run = start([calling({"url": url, "question": "When?", "render": True}), {"text": "Ok."}], site)

    Worker(lease_seconds=300).run_until_idle()

    (called,) = Step.objects.filter(run=run, kind="tool_call", name="web_fetch")
    assert isinstance(called.result, dict)
    assert called.result["is_error"] is True
    assert called.result["output"].startswith(
        f"web_fetch: 127.0.0.1:{port} was refused by the egress policy: 127.0.0.1:{port} is"
        " not allowed"
    )
    assert not Run.objects.filter(parent=run).exists()  # no reader for no page
    refused = Event.objects.filter(run=run, kind="egress.refused", data__port=port)
    assert any("is not allowed" in event.data["reason"] for event in refused)
    assert not Event.objects.filter(run=run, kind="egress.allowed").exists()


@pytest.mark.usefixtures("service")
def test_a_run_s_second_page_is_read_by_the_chromium_its_first_page_started(site: Site) -> None:
    run = start([{"text": "Ok."}], site)
    url = f"{site.url}/page"
    state = nodes.local_state()
    began = time.monotonic()
    first = browser.render(url, run_id=run.pk)
    cold = time.monotonic() - began
    began = time.monotonic()
    second = browser.render(url, run_id=run.pk)
    warm_seconds = time.monotonic() - began

    # Each page as its script wrote it, through the egress with that render's own token.
    for page in (first, second):
        assert FACT in page.html
        assert page.status == 200
    # The same VM, the same Chromium: started for the first page, kept for the second.
    assert first.boot_id
    assert first.boot_id == second.boot_id
    assert first.browser_pid is not None
    assert first.browser_pid == second.browser_pid
    assert (first.fresh, second.fresh) == (True, False)
    assert warm_seconds < cold / 2, (cold, warm_seconds)
    assert second.seconds < first.seconds / 2, (first.seconds, second.seconds)
    for headers in site.headers:
        assert "proxy-authorization" not in headers
    # The browser's VM is the run's, apart from the VM of its commands (none booted here).
    keys = [entry["key"] for entry in vmpool.vms(state)]
    assert warm.browser_key(run.pk) in keys
    assert warm.key(run.pk) not in keys

    # Chromium killed between two pages (as a page that crashed it would leave it): the next
    # render starts a fresh one, in the same VM.
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    killer = browser.page_profile(
        url, 1, run_id=run.pk, key=warm.browser_key(run.pk), attached=attached
    )
    killer["argv"] = ["kill", "-9", str(first.browser_pid)]
    killed = dispatch.execute(killer, step=None, needs=dispatch.Needs(2, 1 << 30, 64 << 20))
    assert killed["exit_code"] == 0, killed
    third = browser.render(url, run_id=run.pk)
    assert FACT in third.html
    assert third.fresh
    assert third.boot_id == first.boot_id
    assert third.browser_pid != first.browser_pid

    # The run's end releases it.
    assert warm.release(run.pk) == ["local"]
    assert warm.browser_key(run.pk) not in [entry["key"] for entry in vmpool.vms(state)]
