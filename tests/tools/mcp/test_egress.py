"""MCP servers reach out only through their run's egress proxy: what its allow-list allows,
bridges adding credentials the server never holds; no secret enters a server's environment or
the journal."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from cluster import egress
from kernel.context import StepCall
from kernel.journal import Fence
from kernel.models import Run
from tests.api.conftest import Api
from tests.kernel.factories import make_mission
from tests.tools.mcp.conftest import echo_command
from tools.base import Tool, ToolEnv, ToolError
from tools.mcp import toolset

# Transactional: the egress service reads the run from its own connection.
pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-bridge-credential-" + uuid.uuid4().hex[:8]


class Page:
    """An HTTP server on 127.0.0.2 (not on the sandboxes' no_proxy list, which names 127.0.0.1):
    it answers a page and keeps the headers it saw."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # the stdlib's naming
                seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                body = f"<html><body><p>the page at {self.path}</p></body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    server = Page()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def add(api: Api, name: str, command: list[str]) -> None:
    assert api.post("/mcp/servers", {"name": name, "command": command}).status_code == 201
    assert api.post(f"/mcp/servers/{name}/approve").status_code == 200


def run_with(servers: list[str], **given: Any) -> Run:
    return Run.objects.create(
        account=make_mission(),
        program="test",
        input={"mcp_tools": toolset.freeze(servers), **given},
    )


def call(run: Run, name: str, arguments: dict[str, Any]) -> str:
    (tool,) = [t for t in toolset.build(run.input["mcp_tools"]) if t.name == name]
    assert isinstance(tool, Tool)
    step = StepCall(run.pk, 1, uuid.uuid4().hex, {}, False, threading.Event(), Fence(run.pk, 1))
    return str(tool.run(ToolEnv(step, run.pk, None, None), tool.validate(arguments)))


def test_the_fetch_server_reaches_an_allowed_host_through_the_proxy(
    approver: Api, service: egress.Service, page: Page
) -> None:
    add(approver, "fetch", ["mcp-server-fetch", "--ignore-robots-txt", "--allow-private-ips"])
    allowed = run_with(["fetch"], allowed_hosts=["127.0.0.2"])

    # Raw: simplifying HTML would have the server fetch a helper from npm (refused likewise).
    text = call(
        allowed, "mcp__fetch__fetch", {"url": f"http://127.0.0.2:{page.port}/doc", "raw": True}
    )

    assert "the page at /doc" in text
    assert page.seen[-1]["path"] == "/doc"
    # A run whose allow-list does not name the host gets the proxy's refusal, not the page.
    refused = run_with(["fetch"], allowed_hosts=["example.invalid"])
    with pytest.raises(ToolError) as error:
        call(
            refused,
            "mcp__fetch__fetch",
            {"url": f"http://127.0.0.2:{page.port}/no", "raw": True},
        )
    assert "the page at /no" not in str(error.value)
    assert all(seen["path"] != "/no" for seen in page.seen)
    assert "not on the run's allow-list" in " ".join(egress_events(refused))


def test_a_bridge_adds_its_credential_outside_the_server(
    approver: Api,
    service: egress.Service,
    page: Page,
    echo_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The provider bridge's key: in the worker's environment, added by the proxy only.
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setitem(settings.EGRESS_BRIDGE_URLS, "anthropic", f"http://127.0.0.2:{page.port}")
    add(approver, "echo", echo_command(echo_dir))
    run = run_with(["echo"], bridges=["anthropic"])
    answer = call(run, "mcp__echo__get", {"url": "http://anthropic.bridge/api"})
    environment = call(run, "mcp__echo__environment", {})

    assert "the page at /api" in answer
    assert page.seen[-1]["x-api-key"] == SECRET
    assert SECRET not in environment
    assert "http_proxy=" in environment  # its way out, with the run's token only
    assert os.environ["ANTHROPIC_API_KEY"] == SECRET
    journal = [str(row) for row in Run.objects.filter(pk=run.pk).values("input", "output")]
    assert all(SECRET not in row for row in journal)
    events = egress_events(run)
    assert all(SECRET not in event for event in events)


def egress_events(run: Run) -> list[str]:
    from kernel.models import Event

    return [str(event.data) for event in Event.objects.filter(run=run)]


def test_a_runs_reach_names_its_servers_bridges(approver: Api) -> None:
    from tools.mcp.models import McpServer

    add(approver, "time", ["mcp-server-time"])
    assert toolset.reach(["time"]) == {}
    McpServer.objects.filter(name="time").update(bridge="anthropic")
    assert toolset.reach(["time"]) == {"bridges": ["anthropic"]}
