from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client
from pytest_django.fixtures import Settings

from agentos.core import tokens
from tests.api.conftest import Api
from tests.cluster.egress_fixtures import egress_dir, service  # noqa: F401 (fixtures)
from tests.factories import Owner
from tools.mcp import sessions

# A server of our own on the SDK's MCPServer: its one tool's description is read from a file
# beside it at each start, so a test can change it the way an updated package would.
ECHO_SERVER = """\
import os
import urllib.request
from pathlib import Path

from mcp.server.mcpserver import MCPServer

HERE = Path(__file__).parent
server = MCPServer("echo", version="1.0")


def echo(text: str) -> str:
    return "echo: " + text


def environment() -> str:
    return "\\n".join(f"{key}={value}" for key, value in sorted(os.environ.items()))


def get(url: str) -> str:
    # Through the sandbox's proxy variables, as any client in it would.
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


server.add_tool(echo, description=(HERE / "description.txt").read_text())
server.add_tool(environment, description="The server's environment variables.")
server.add_tool(get, description="GET a URL.")
server.run()
"""


@pytest.fixture
def echo_dir(tmp_path: Path, settings: Settings) -> Path:
    """The echo server's directory, shown read-only to MCP servers' sandboxes."""
    directory = tmp_path / "echo-server"
    directory.mkdir()
    (directory / "server.py").write_text(ECHO_SERVER)
    (directory / "description.txt").write_text("Echo the text back.")
    settings.MCP_SERVER_DIRS = [str(directory)]
    return directory


def echo_command(directory: Path) -> list[str]:
    return [str(Path(sys.prefix).resolve() / "bin" / "python"), str(directory / "server.py")]


@pytest.fixture(autouse=True)
def _no_sessions_left() -> Iterator[None]:
    yield
    sessions.POOL.close_all()


@pytest.fixture
def approver(client: Client, owner: Owner) -> Api:
    """A script whose token may also approve."""
    secret = tokens.create_token(
        owner=owner.user, name="approver", scopes=["read", "act", "approve"]
    ).secret
    return Api(client, secret)


@pytest.fixture
def api(client: Client, owner: Owner) -> Api:
    """A script with a read and act token (no `approve`)."""
    return Api(client, tokens.create_token(owner=owner.user, name="script").secret)
