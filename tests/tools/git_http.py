"""A real git smart-HTTP server for tests: `git http-backend` behind a threaded HTTP server that
demands one Basic credential, and records every Authorization header it saw."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class GitServer:
    url: str  # http://127.0.0.1:<port>/
    root: Path
    refused: list[str] = field(default_factory=list)  # paths answered 401


@contextmanager
def git_http_server(root: Path, *, user: str, token: str) -> Iterator[GitServer]:
    expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.serve()

        def do_POST(self) -> None:
            self.serve()

        def log_message(self, format: str, *args: object) -> None:
            pass

        def serve(self) -> None:
            if self.headers.get("Authorization") != expected:
                server.refused.append(self.path)
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            env = {
                "PATH": "/usr/bin:/bin",
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "REQUEST_METHOD": self.command,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "REMOTE_USER": user,
                "REMOTE_ADDR": "127.0.0.1",
            }
            done = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode().split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server = GitServer(url=f"http://127.0.0.1:{httpd.server_address[1]}/", root=root)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def bare_remote(path: Path) -> Path:
    subprocess.run(
        ["git", "init", "--quiet", "--bare", "--initial-branch=main", str(path)],
        check=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"},
    )
    subprocess.run(
        ["git", "-C", str(path), "config", "core.logAllRefUpdates", "always"], check=True
    )
    return path
