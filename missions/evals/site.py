"""The pages of a task's site (`site/` beside its `repo/`), served on 127.0.0.1 while the task
runs: the Web of a research task, offline. The mission reaches it as it reaches any host, through
`web_fetch` and its run's egress (the task's mission is allowed that one host); the citations
oracle fetches its pages again, and nothing else (`Site.text`).

The egress service must answer for `web_fetch` to reach anything: `egress_running` uses the one
`manage.py serve` runs for this data dir, else runs one for the evaluation's duration.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from cluster import egress
from missions import web_pages

TYPES = {".html": "text/html; charset=utf-8", ".json": "application/json", ".txt": "text/plain"}
SECONDS = 10


class Site:
    """`pages` (URL path without its leading slash -> content) at `url`, until closed."""

    def __init__(self, pages: dict[str, bytes]) -> None:
        served = dict(pages)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # a page read is the egress journal's event, not this server's log line

            def do_GET(self) -> None:  # the stdlib's naming
                path = unquote(urlsplit(self.path).path).lstrip("/") or "index.html"
                body = served.get(path)
                kind = TYPES.get(f".{path.rpartition('.')[2]}", "")
                if body is None or not kind:
                    body, kind = b"no such page\n", "text/plain"
                    self.send_response(404)
                else:
                    self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.host = f"127.0.0.1:{self.port}"
        # Polled for shutdown at this interval: a task's site closes without a half-second wait.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=SECONDS)

    def text(self, url: str) -> str | None:
        """The text of a page of this site fetched again, as web_fetch's reader read it (HTML
        made text); None for a URL of any other host, or a page it does not have."""
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.netloc != self.host:
            return None  # the oracle fetches our own pages only, never a URL an agent wrote
        try:
            response = httpx.get(url, timeout=SECONDS, follow_redirects=False, trust_env=False)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        if response.headers.get("content-type", "").startswith("text/html"):
            return web_pages.html_text(response.text)[0]
        return response.text


@contextlib.contextmanager
def serving(pages: dict[str, bytes]) -> Iterator[Site | None]:
    """The site of a task while it runs; None for a task without one."""
    if not pages:
        yield None
        return
    site = Site(pages)
    try:
        yield site
    finally:
        site.close()


def _answers() -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(egress.CONNECT_SECONDS)
        try:
            client.connect(str(egress.directory() / egress.CONTROL))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def egress_running(needed: bool) -> Iterator[None]:
    """The egress service, when `needed` and none answers: run here until the suite ends."""
    if not needed or _answers():
        yield
        return
    with egress.running():
        yield
