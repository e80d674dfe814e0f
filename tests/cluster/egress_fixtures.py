"""Shared by the egress and exfiltration tests (through tests/cluster/conftest.py): the egress
service on its own socket directory, plain upstream HTTP servers on 127.0.0.1 (the "allowed test
hosts"), and a provider's wire-format server for the bridge."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cluster import egress
from tests.providers.wire import WireServer, wire_server


class Upstream:
    """A plain HTTP server on 127.0.0.1 that answers who asked for what (a POST's body too). A
    GET of `/hold` first calls `on_hold` (when a test set it): a sandbox's request that lets the
    test act at that point of the sandbox's script, then answers."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.on_hold: Callable[[], None] | None = None
        seen = self.seen
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # the stdlib's naming
                seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                if self.path == "/hold" and upstream.on_hold is not None:
                    upstream.on_hold()
                body = f"hello from {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length).decode("latin-1")
                seen.append(
                    {"path": self.path, "body": sent}
                    | {k.lower(): v for k, v in self.headers.items()}
                )
                body = f"hello from {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def egress_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix=f"agentos-egress-{os.getpid()}-", dir="/tmp"))
    base.chmod(0o711)
    os.environ["AGENTOS_EGRESS_DIR"] = str(base / "sockets")
    yield base / "sockets"
    os.environ.pop("AGENTOS_EGRESS_DIR", None)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def service(egress_dir: Path) -> Iterator[egress.Service]:
    with egress.running(egress_dir) as running:
        yield running


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()


@pytest.fixture(scope="module")
def provider() -> Iterator[WireServer]:
    with wire_server() as server:
        yield server
