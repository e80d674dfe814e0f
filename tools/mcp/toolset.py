"""MCP tools as the model sees them: `mcp__<server>__<tool>`, frozen into a run at its launch.

`freeze(servers)` turns the enabled (pinned, unchanged) tools of the named servers into plain
definitions recorded in the run's input (`Spec.mcp_tools`); `build(definitions)` makes `Tool`s of
them when the run starts or resumes, the same on every turn (the prompt prefix never changes).

Each is deferred: its name and a short description in context, its pinned schema (with the full
description) through `load_tool_schema` (`schema_of`). Its effect class is the owner's; its risk
is `network` when it only reads and `external` otherwise (both ask the owner unless a rule
allows); its output is trusted as the Web's unless the owner trusts the server, and a call sets
UNTRUSTED (untrusted server) and OUTWARD (a tool that does not only read) (`kernel.exposure`).

At call time the tool's live hash must still be the one frozen into the run: a server that
changed a description since is refused until the owner approves it again."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import mcp_types

from cluster.sandbox import SandboxUnavailable
from kernel import exposure
from kernel.models import Effect, Run, Trust
from tools.base import Risk, Tool, ToolEnv, ToolError
from tools.mcp import remote, servers, sessions
from tools.mcp.models import McpServer, McpTool, Transport

PREFIX = "mcp__"
SHORT_DESCRIPTION = 200
MAX_OUTPUT = 50_000
CALL_SECONDS = 120.0


def tool_name(server: str, tool: str) -> str:
    return f"{PREFIX}{server}__{tool}"


def freeze(names: list[str]) -> list[dict[str, Any]]:
    """The definitions of the enabled tools of the servers `names`, sorted by tool name."""
    frozen = [
        {
            "name": tool_name(server.name, row.name),
            "server": server.name,
            "tool": row.name,
            "description": row.pinned_description,
            "schema": row.pinned_schema or {"type": "object"},
            "hash": row.pinned_hash,
            "effect": row.effect,
            "trusted": server.trusted,
            "level": server.level if server.transport == Transport.STDIO else 0,
        }
        for server, row in servers.enabled_tools(names)()
    ]
    return sorted(frozen, key=lambda definition: definition["name"])


def reach(names: list[str]) -> dict[str, list[str]]:
    """What a run using the servers `names` needs in its input for its egress to let them out:
    each server's bridge, and an HTTP server's host when it has none."""
    needed: dict[str, list[str]] = {}
    for server in McpServer.objects.filter(name__in=names):
        if server.transport == Transport.STDIO and not server.bridge:
            continue  # it reaches what the run's own allow-list allows, nothing more
        for key, values in remote.reach(server.url, server.bridge).items():
            needed[key] = [*needed.get(key, []), *values]
    return needed


def build(definitions: list[dict[str, Any]]) -> list[Tool]:
    return [_tool(definition) for definition in definitions]


def by_name(name: str) -> Tool | None:
    """The MCP tool `name` as a run launched now would get it (None: no such enabled tool): for
    what looks tools up by name outside a run (permission rules, "always allow")."""
    if not name.startswith(PREFIX):
        return None
    server, _, tool = name.removeprefix(PREFIX).partition("__")
    for definition in freeze([server]):
        if definition["tool"] == tool:
            return _tool(definition)
    return None


def schema_of(run_id: int, name: str) -> dict[str, Any] | None:
    """What `load_tool_schema` answers for one of the run's MCP tools (None: not one of them)."""
    data = Run.objects.values_list("input", flat=True).get(pk=run_id) or {}
    for definition in data.get("mcp_tools") or []:
        if definition.get("name") == name:
            return {
                "name": name,
                "description": definition["description"],
                "input_schema": definition["schema"],
            }
    return None


def _short(server: str, description: str) -> str:
    first = description.strip().split("\n", 1)[0]
    if len(first) > SHORT_DESCRIPTION:
        first = first[: SHORT_DESCRIPTION - 1] + "…"
    return f"[MCP server {server}] {first}".strip()


def _tool(definition: dict[str, Any]) -> Tool:
    effect = Effect(definition["effect"])
    trusted = bool(definition["trusted"])
    flags = set() if trusted else {exposure.UNTRUSTED}
    if effect != Effect.READ:
        flags.add(exposure.OUTWARD)
    return Tool(
        name=definition["name"],
        description=_short(definition["server"], definition["description"]),
        input_schema=definition["schema"],
        effect=effect,
        risk=Risk.NETWORK if effect == Effect.READ else Risk.EXTERNAL,
        run=_runner(definition),
        min_sandbox_level=int(definition.get("level", 1)),
        deferred=True,
        trust=Trust.TOOL if trusted else Trust.WEB,
        exposes=frozenset(flags),
    )


def _runner(definition: dict[str, Any]) -> Callable[[ToolEnv, dict[str, Any]], str]:
    def run(env: ToolEnv, arguments: dict[str, Any]) -> str:
        return call(env, definition, arguments)

    return run


def call(env: ToolEnv, definition: dict[str, Any], arguments: dict[str, Any]) -> str:
    """1. Refuse unless the tool is still what the run froze. 2. Call it on the run's session
    (started, and its listing recorded, when there is none). 3. Refuse if that listing changed
    it. 4. Its text content, bounded; an MCP error result is a `ToolError`."""
    server = _current(definition)
    key = (server.name, env.run_id)

    def opener() -> sessions.Opener:
        return servers.opener(server, run_id=env.run_id, workspace=env.workspace)

    try:
        result, listing = sessions.POOL.call(
            key,
            opener,
            definition["tool"],
            arguments,
            seconds=CALL_SECONDS,
            stopping=env.call.stopping,
        )
    except (sessions.SessionError, SandboxUnavailable) as error:
        raise ToolError(f"{definition['name']}: {error}") from None
    if listing is not None:
        servers.record_listing(server, listing)
        # The session just listed the server: a change there disables the tool from now on,
        # this call's answer included.
        _current(definition)
    return _text(definition["name"], result)


def _current(definition: dict[str, Any]) -> McpServer:
    row = (
        McpTool.objects.select_related("server")
        .filter(server__name=definition["server"], name=definition["tool"])
        .first()
    )
    if row is None or not row.listed:
        raise ToolError(
            f"{definition['name']} is disabled: its server no longer lists it. Tell the owner."
        )
    if row.description_hash != definition["hash"] or not row.enabled:
        raise ToolError(
            f"{definition['name']} is disabled: its server changed its description or input"
            " schema since the owner approved it. It stays disabled until the owner approves"
            " the change; use another tool, or tell the owner."
        )
    return row.server


def _text(name: str, result: mcp_types.CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_OUTPUT:
        text = text[:MAX_OUTPUT] + f"\n[output truncated: {len(text) - MAX_OUTPUT} characters]"
    if result.is_error:
        raise ToolError(f"{name} failed: {text}")
    return text
