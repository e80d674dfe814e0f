"""A local HTTP server that speaks a provider's wire format, for driving the real SDKs.

Tests queue the answers (an SSE event stream, an error status with headers and a JSON body, a
plain JSON response, or a stream cut after N events) and read back every request the SDK sent,
POST or GET (the model-listing endpoints are GETs). The SDKs use httpx2, which
no httpx mock intercepts: a real socket is the honest way.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Stream:
    """`events` as (event name, data) pairs; with `cut_after`, the connection drops after that
    many events, mid-stream, without a terminating chunk.

    An empty name sends a bare `data:` line (Chat Completions names no events); `done` ends the
    stream with `data: [DONE]`. With `hold_after`, the server stops after that many events and
    keeps the connection open (SSE comments) until the client hangs up, counted in `hangups`.

    With `trickle_after`, a slow model: after that many events, `trickle` (one small delta) is
    sent every `trickle_seconds`, `trickle_count` times, then the rest of the events. Between
    two deltas the server watches the connection, and notes in `disconnects` the moment
    (`time.monotonic()`) the client closed it."""

    events: list[tuple[str, dict[str, Any]]]
    cut_after: int | None = None
    done: bool = False
    hold_after: int | None = None
    trickle_after: int | None = None
    trickle: tuple[str, dict[str, Any]] | None = None
    trickle_seconds: float = 0.5
    trickle_count: int = 120  # a minute at the default pace


@dataclass(frozen=True)
class Failure:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Json:
    """A plain JSON response, e.g. a model listing answering a GET."""

    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


Answer = Stream | Failure | Json


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes
    method: str = "POST"  # last, with a default: tests built these before GETs were served


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # Tests cut streams and clients hang up on errors on purpose: not worth a traceback.
        pass


class WireServer:
    def __init__(self) -> None:
        self.answers: deque[Answer] = deque()
        self.received: list[Received] = []
        self.hangups = 0
        self.disconnects: list[float] = []  # when a trickling stream saw its client hang up
        self.trickling = threading.Event()  # set once a stream has begun to trickle
        self._lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def queue(self, *answers: Answer) -> None:
        self.answers.extend(answers)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # the stdlib's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self._answer("POST", raw)

            def do_GET(self) -> None:
                # `path` keeps the query string: pagination parameters are worth asserting on.
                self._answer("GET", b"")

            def _answer(self, method: str, raw: bytes) -> None:
                # One queue for every method, served in order: a test reads a story of requests.
                body = json.loads(raw or b"{}")
                with server._lock:
                    server.received.append(
                        Received(self.path, dict(self.headers), body, raw, method)
                    )
                    answer = server.answers.popleft() if server.answers else None
                if answer is None:
                    self._json(500, {"error": {"type": "api_error", "message": "no answer queued"}})
                elif isinstance(answer, Failure | Json):
                    self._json(answer.status, answer.body, answer.headers)
                else:
                    self._stream(answer)

            def _json(
                self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, answer: Stream) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for index, (name, data) in enumerate(answer.events):
                    if answer.cut_after is not None and index >= answer.cut_after:
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)  # drop it mid-stream, no final chunk
                        return
                    if answer.hold_after is not None and index >= answer.hold_after:
                        self._hold()
                        return
                    if answer.trickle_after == index and not self._trickle(answer):
                        return
                    self._event(name, data)
                if answer.done:
                    self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _event(self, name: str, data: dict[str, Any]) -> None:
                line = f"data: {json.dumps(data)}\n\n"
                self._chunk(f"event: {name}\n{line}" if name else line)

            def _trickle(self, answer: Stream) -> bool:
                """One delta every `trickle_seconds`; False when the client hung up meanwhile
                (noted in `disconnects` the moment the server saw it)."""
                assert answer.trickle is not None
                server.trickling.set()
                for _ in range(answer.trickle_count):
                    try:
                        self._event(*answer.trickle)
                    except OSError:
                        return self._hung_up()
                    # The client sends nothing while it reads a response: readable means the
                    # connection was closed (an empty read) or reset.
                    readable, _, _ = select.select(
                        [self.connection], [], [], answer.trickle_seconds
                    )
                    if readable:
                        try:
                            closed = self.connection.recv(1, socket.MSG_PEEK) == b""
                        except OSError:
                            closed = True
                        if closed:
                            return self._hung_up()
                return True

            def _hung_up(self) -> bool:
                with server._lock:
                    server.disconnects.append(time.monotonic())
                self.close_connection = True
                return False

            def _chunk(self, text: str) -> None:
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _hold(self) -> None:
                # A comment every 20 ms: writing is how a server learns the client hung up.
                self.close_connection = True
                for _ in range(250):
                    try:
                        self._chunk(": waiting\n\n")
                    except OSError:
                        with server._lock:
                            server.hangups += 1
                        return
                    time.sleep(0.02)

        return Handler


@contextmanager
def wire_server() -> Iterator[WireServer]:
    server = WireServer()
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
