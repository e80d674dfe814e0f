"""A streamable-HTTP MCP server (the SDK's own MCPServer on 127.0.0.1, requiring a bearer token)
reached only through the run's egress proxy, the token added by an owner's bridge: listed by a
run of its own at registration, called by a run's tool, and the token nowhere on our side."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer

from agentos.core import audit
from cluster import bridges, egress
from kernel.context import StepCall
from kernel.journal import Fence
from kernel.models import Event, Run, Step
from tests.api.conftest import Api
from tests.kernel.factories import make_mission
from tests.polling import wait_for
from tests.processes import worker_thread
from tools.base import ToolEnv
from tools.mcp import toolset

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "mcp-bearer-" + uuid.uuid4().hex


class Remote:
    """MCPServer over streamable HTTP behind a bearer check, in a thread of this process."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        server = MCPServer("remote-notes", version="3.1")

        def note(topic: str) -> str:
            return f"the note on {topic}"

        server.add_tool(note, description="Read the note on a topic.")
        inner = server.streamable_http_app()
        seen = self.seen

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope["headers"])
                given = headers.get(b"authorization", b"").decode()
                seen.append(given)
                if given != f"Bearer {TOKEN}":
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b"no"})
                    return
            await inner(scope, receive, send)

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = uvicorn.Config(guarded, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=20, message="the MCP server did not start")

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def remote() -> Iterator[Remote]:
    server = Remote()
    yield server
    server.close()


def test_an_http_server_is_reached_through_the_proxy_with_the_bridges_token(
    approver: Api, service: egress.Service, remote: Remote
) -> None:
    bridges.put(
        "notes",
        base_url=f"http://127.0.0.1:{remote.port}",
        secret=TOKEN,
        actor=audit.Actor.command("tests"),
    )
    with worker_thread():
        added = approver.post(
            "/mcp/servers",
            {"name": "notes", "url": "https://notes.example/mcp", "bridge": "notes"},
        )
        assert added.status_code == 201, added.content
        assert added.json()["version"] == "remote-notes 3.1"
        assert [tool["name"] for tool in added.json()["tools"]] == ["note"]
        assert approver.post("/mcp/servers/notes/approve").status_code == 200

    run = Run.objects.create(
        account=make_mission(),
        program="test",
        input={"mcp_tools": toolset.freeze(["notes"]), **toolset.reach(["notes"])},
    )
    assert run.input["bridges"] == ["notes"]
    (tool,) = toolset.build(run.input["mcp_tools"])
    call = StepCall(run.pk, 1, "k", {}, False, threading.Event(), Fence(run.pk, 1))
    assert tool.run(ToolEnv(call, run.pk, None, None), {"topic": "pins"}) == "the note on pins"

    assert remote.seen
    assert all(seen == f"Bearer {TOKEN}" for seen in remote.seen)
    # The token is the bridge's: nowhere in runs' inputs, steps or events.
    stored = [
        *(str(row) for row in Run.objects.values_list("input", "output")),
        *(str(row) for row in Step.objects.values_list("request", "result")),
        *(str(row) for row in Event.objects.values_list("data", flat=True)),
    ]
    assert all(TOKEN not in row for row in stored)


def test_an_http_server_without_its_bridge_is_refused(
    approver: Api, service: egress.Service, remote: Remote
) -> None:
    with worker_thread():
        added = approver.post(
            "/mcp/servers", {"name": "bare", "url": f"http://127.0.0.1:{remote.port}/mcp"}
        )
    # Reached without the bridge, the server refuses (no token): nothing is registered.
    assert added.status_code == 422, added.content
    assert added.json()["error"]["code"] == "server_failed"
    assert "" in remote.seen
