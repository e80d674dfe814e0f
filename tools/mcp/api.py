"""MCP servers over /api/v1: registered (listed at once, pending approval), read with their
tools' pins and pending diffs, approved (pinned), trusted and their tools' effect classes set.
Refusals are `McpServerError`s, mapped to the API's error shape in `agentos.api`; nothing is
written when one is raised."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from agentos.core import audit
from tools.mcp import servers
from tools.mcp.models import SHOWN_FIELDS, McpServer

router = Router(tags=["mcp"])

EffectName = Literal["read", "idempotent_write", "non_idempotent"]


class ServerIn(Schema):
    model_config = ConfigDict(extra="forbid")

    # Checked by the service (400 naming the rule): the schema only bounds the length.
    name: str = Field(max_length=100)
    command: list[str] | None = Field(
        None, max_length=200, description="The argv of a stdio server (run in the sandbox)"
    )
    url: str | None = Field(None, max_length=500, description="Or a streamable-HTTP endpoint")
    level: int = Field(1, ge=0, le=3, description="The sandbox level a stdio server runs at")
    environment: str = Field("", max_length=120, description="A project whose /env it mounts")
    bridge: str = Field("", max_length=31, description="The bridge that adds its credentials")


class ToolPatch(Schema):
    model_config = ConfigDict(extra="forbid")

    effect: EffectName


class ServerPatch(Schema):
    model_config = ConfigDict(extra="forbid")

    trusted: bool | None = None
    tools: dict[str, ToolPatch] = Field(default_factory=dict)


class ApproveIn(Schema):
    model_config = ConfigDict(extra="forbid")

    tools: list[str] | None = Field(None, description="Only these tools; default: every tool")


class ToolOut(Schema):
    name: str
    description: str
    input_schema: dict[str, Any]
    description_hash: str
    pinned_hash: str
    pinned: bool
    enabled: bool
    listed: bool
    effect: str
    diff: str = Field(description="Pinned against listed text, when they differ (git's format)")


class ServerOut(Schema):
    name: str
    transport: str
    command: list[str]
    url: str
    level: int
    environment: str
    bridge: str
    trusted: bool
    status: str
    last_error: str
    version: str
    pinned_version: str
    listed_at: datetime | None
    approved_at: datetime | None
    tools: list[ToolOut]


def server_out(server: McpServer) -> dict[str, Any]:
    return {
        **{field: getattr(server, field) for field in SHOWN_FIELDS},
        "tools": [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
                "description_hash": tool.description_hash,
                "pinned_hash": tool.pinned_hash,
                "pinned": tool.pinned,
                "enabled": tool.enabled,
                "listed": tool.listed,
                "effect": tool.effect,
                "diff": servers.diff(tool),
            }
            for tool in server.tools.all()
        ],
    }


@router.get("/mcp/servers", response=list[ServerOut], summary="MCP servers by name")
def list_servers(request: HttpRequest) -> list[dict[str, Any]]:
    return [server_out(server) for server in McpServer.objects.prefetch_related("tools")]


@router.post(
    "/mcp/servers",
    response={201: ServerOut},
    summary="Register an MCP server: its tools are listed at once, pending approval",
)
def add_server(request: HttpRequest, payload: ServerIn) -> Status[dict[str, Any]]:
    server = servers.add_server(
        name=payload.name,
        command=payload.command,
        url=payload.url,
        level=payload.level,
        environment=payload.environment,
        bridge=payload.bridge,
        actor=audit.Actor.of(request),
    )
    return Status(201, server_out(server))


@router.get("/mcp/servers/{name}", response=ServerOut, summary="An MCP server and its pins")
def get_server(request: HttpRequest, name: str) -> dict[str, Any]:
    return server_out(servers.server_or_404(name))


@router.patch(
    "/mcp/servers/{name}",
    response=ServerOut,
    summary="Trust an MCP server's output, or set its tools' effect classes",
)
def update_server(request: HttpRequest, name: str, payload: ServerPatch) -> dict[str, Any]:
    # An owner decision, like approving: a token needs `approve` (agentos.core.scopes).
    server = servers.update(
        server=servers.server_or_404(name),
        trusted=payload.trusted,
        effects={tool: patch.effect for tool, patch in payload.tools.items()},
        actor=audit.Actor.of(request),
    )
    return server_out(server)


@router.post(
    "/mcp/servers/{name}/approve",
    response=ServerOut,
    summary="Approve what an MCP server lists now: pin its tools' descriptions and schemas",
)
def approve_server(
    request: HttpRequest, name: str, payload: ApproveIn | None = None
) -> dict[str, Any]:
    server = servers.approve(
        server=servers.server_or_404(name),
        tools=payload.tools if payload is not None else None,
        actor=audit.Actor.of(request),
    )
    return server_out(server)
