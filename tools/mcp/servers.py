"""The owner's MCP servers: registered, listed, approved (pinned), trusted, one function per
change, each its own transaction with its security-log event; called alike by the API
(`tools.mcp.api`), the admin and `manage.py mcp_add`.

A listing (at registration, at approval, and at each session start) records what the server
offers now; a pinned tool whose description or schema changed since the owner approved it is
disabled, and its server shows `changed` with the diff until the owner approves again."""

from __future__ import annotations

import difflib
import functools
import json
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.apps import apps
from django.db import transaction
from django.utils import timezone

from agentos.core import audit
from agentos.core.errors import DomainError
from agentos.core.models import AuditEvent
from cluster import bridges, egress, environments, long_lived, nodes, sandbox
from cluster.sandbox import SandboxUnavailable
from kernel.models import Effect
from tools import environments as checkouts
from tools.mcp import remote, sessions, transport
from tools.mcp.models import (
    NAME_PATTERN,
    McpServer,
    McpTool,
    ServerStatus,
    Transport,
    description_hash,
)

MAX_COMMAND_BYTES = 8000
EFFECTS = {effect.value for effect in Effect if effect != Effect.MODEL_CALL}


class McpServerError(DomainError):
    """A server's registration or change was refused; nothing was written."""


def _refuse(message: str, *, status: int = 400, code: str = "invalid_input") -> McpServerError:
    return McpServerError(message, status=status, code=code)


def server_or_404(name: str) -> McpServer:
    try:
        return McpServer.objects.get(name=name)
    except McpServer.DoesNotExist:
        raise _refuse(f"No MCP server named {name!r}.", status=404, code="not_found") from None


# --- Registering --------------------------------------------------------------------------------


def check_name(name: str) -> None:
    if not re.match(NAME_PATTERN, name) or "__" in name:
        raise _refuse(
            f"Bad server name {name!r}: a lowercase letter, then up to 30 lowercase letters,"
            " digits, '-' or '_' (never '__', which separates the parts of a tool's name)."
        )


def _check_transport(command: list[str] | None, url: str | None) -> str:
    if (command is None) == (url is None):
        raise _refuse("Give either a command (stdio) or a url (streamable HTTP), not both.")
    if command is not None:
        if not command or not all(
            isinstance(arg, str) and arg and "\0" not in arg for arg in command
        ):
            raise _refuse("The command is a non-empty list of non-empty strings (argv).")
        if sum(len(arg.encode()) for arg in command) > MAX_COMMAND_BYTES:
            raise _refuse(f"The command is longer than {MAX_COMMAND_BYTES} bytes.")
        return Transport.STDIO
    url = url or ""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or len(url) > 500:
        raise _refuse(f"Bad url {url!r}: an absolute http(s) URL of at most 500 characters.")
    if parsed.username or parsed.password:
        raise _refuse("The url may not hold credentials: a bridge adds them (`bridge`).")
    return Transport.HTTP


def _check_environment(environment: str) -> None:
    if not environment:
        return
    # By name, through the app registry: projects belong to a higher layer than tools.
    project = apps.get_model("missions", "Project")
    found = project.objects.filter(name=environment).first()
    if found is None:
        raise _refuse(f"No project named {environment!r} (environment).", status=422)
    if not str(getattr(found, "environment_setup", "") or "").strip():
        raise _refuse(
            f"Project {environment!r} has no environment (its setup commands are empty).",
            status=422,
        )


def _check_bridge(bridge: str) -> None:
    if bridge and not bridges.exists(bridge):
        known = ", ".join(sorted(bridges.names())) or "none"
        raise _refuse(f"No bridge named {bridge!r} (known: {known}).", status=422)


def add_server(
    *,
    name: str,
    command: list[str] | None = None,
    url: str | None = None,
    level: int = 1,
    environment: str = "",
    bridge: str = "",
    actor: audit.Actor,
) -> McpServer:
    """Check, list the server's tools (it must start and answer), then save it with them,
    pending the owner's approval. Nothing is saved when any step fails."""
    check_name(name)
    kind = _check_transport(command, url)
    if level != 1:
        raise _refuse(f"Sandbox level {level} is not available for MCP servers: use 1.", status=422)
    _check_environment(environment)
    _check_bridge(bridge)
    if McpServer.objects.filter(name=name).exists():
        raise _refuse(f"An MCP server named {name!r} exists.", status=409, code="conflict")
    server = McpServer(
        name=name,
        transport=kind,
        command=list(command or []),
        url=url or "",
        level=level,
        environment=environment,
        bridge=bridge,
    )
    try:
        listing = list_now(server)
    except (sessions.SessionError, SandboxUnavailable) as error:
        raise _refuse(
            f"The server {name!r} did not list its tools: {error}",
            status=422,
            code="server_failed",
        ) from None
    with transaction.atomic():
        if McpServer.objects.select_for_update().filter(name=name).exists():
            raise _refuse(f"An MCP server named {name!r} exists.", status=409, code="conflict")
        server.save()
        _record(server, listing)
        audit.record_by(
            AuditEvent.Kind.MCP_CHANGED, actor, server=name, change="added", transport=str(kind)
        )
    server.refresh_from_db()
    return server


# --- Listing -------------------------------------------------------------------------------------


def opener(
    server: McpServer, *, run_id: int | None = None, workspace: Path | None = None
) -> sessions.Opener:
    """How to start a session with `server`, built in the caller's thread (it may read the
    database: the egress attachment mints a token)."""
    if server.transport == Transport.HTTP:
        if run_id is None:
            raise sessions.SessionError("an HTTP server is reached only on a run's behalf")
        return remote.opener(server.url, server.bridge, run_id)
    env_dir = _environment(server.environment)
    attached = egress.attach_for_run(run_id, seconds=sessions.MAX_AGE_SECONDS) if run_id else None
    spawn = long_lived.spawn(
        transport.resolve(list(server.command)),
        run_id=run_id,
        workdir=workspace,
        read_only=transport.runtime(),
        egress=attached,
        env_dir=env_dir,
    )

    def open_(log: transport.ServerLog) -> Any:
        return transport.sandboxed_stdio(spawn, log)

    return open_


def _environment(name: str) -> Path | None:
    """The frozen environment of project `name` on this host, built first if it is not (as a
    project's runs get theirs: `cluster.environments`), for /env; None without one."""
    if not name:
        return None
    project = apps.get_model("missions", "Project").objects.filter(name=name).first()
    if project is None:
        raise sessions.SessionError(f"the project {name!r} whose environment it mounts is gone")
    repository, commit = str(project.repository), str(project.environment_commit)
    found = environments.of_project(
        project.pk,
        str(project.environment_setup),
        commit,
        functools.partial(checkouts.checkout, repository, commit) if repository else None,
    )
    if found is None:
        raise sessions.SessionError(f"the project {name!r} has no environment any more")
    sandbox.build_environment(found)  # nothing to do when this version is built already
    return nodes.local_state() / "environments" / found.name / found.version


def list_now(server: McpServer) -> sessions.Listing:
    """A fresh listing, from a session of its own: a stdio server without a run (no network, no
    workspace), an HTTP one in a listing run of its own (`remote.list_through_run`)."""
    if server.transport == Transport.HTTP:
        return remote.list_through_run(server.url, server.bridge)
    return sessions.POOL.list_now(opener(server))


def refresh(server: McpServer) -> McpServer:
    """List `server` again and record what it offers (an error is recorded on the server)."""
    try:
        listing = list_now(server)
    except (sessions.SessionError, SandboxUnavailable) as error:
        McpServer.objects.filter(pk=server.pk).update(
            status=ServerStatus.ERROR, last_error=str(error)[:4000]
        )
        server.refresh_from_db()
        return server
    record_listing(server, listing)
    server.refresh_from_db()
    return server


def record_listing(server: McpServer, listing: sessions.Listing) -> None:
    with transaction.atomic():
        McpServer.objects.select_for_update().get(pk=server.pk)
        _record(server, listing)


def _record(server: McpServer, listing: sessions.Listing) -> None:
    """Upsert the listed tools with their current hashes (pins untouched), then the status."""
    seen: set[str] = set()
    for tool in listing.tools:
        schema = dict(tool.input_schema or {"type": "object"})
        description = tool.description or ""
        digest = description_hash(tool.name, description, schema)
        seen.add(tool.name)
        McpTool.objects.update_or_create(
            server=server,
            name=tool.name,
            defaults={
                "description": description,
                "input_schema": schema,
                "description_hash": digest,
                "listed": True,
            },
        )
    McpTool.objects.filter(server=server).exclude(name__in=seen).update(listed=False)
    McpServer.objects.filter(pk=server.pk).update(
        version=listing.version[:200],
        listed_at=timezone.now(),
        last_error="",
        status=_status(server),
    )


def _status(server: McpServer) -> str:
    rows = list(McpTool.objects.filter(server=server))
    pinned = [row for row in rows if row.pinned]
    if any(row.pinned_hash != row.description_hash or not row.listed for row in pinned):
        return ServerStatus.CHANGED
    return ServerStatus.READY if pinned else ServerStatus.PENDING


# --- The owner's decisions -----------------------------------------------------------------------


def approve(*, server: McpServer, tools: list[str] | None = None, actor: audit.Actor) -> McpServer:
    """Pin what the server lists now, all its tools or only `tools`. It is listed again first:
    a tool whose text moved since the owner last saw it is not pinned blind (409, the new text
    and its diff are then on the server's page for the next approval)."""
    shown = dict(McpTool.objects.filter(server=server).values_list("name", "description_hash"))
    server = refresh(server)
    if server.status == ServerStatus.ERROR:
        raise _refuse(
            f"The server {server.name!r} did not list its tools: {server.last_error}",
            status=422,
            code="server_failed",
        )
    with transaction.atomic():
        locked = McpServer.objects.select_for_update().get(pk=server.pk)
        rows = {row.name: row for row in McpTool.objects.filter(server=locked, listed=True)}
        chosen = list(rows) if tools is None else tools
        unknown = sorted(set(chosen) - set(rows))
        if unknown:
            raise _refuse(f"{locked.name} lists no tool named {', '.join(unknown)}.", status=422)
        # Also a tool that was not there: the owner never saw its text.
        moved = sorted(name for name in chosen if shown.get(name) != rows[name].description_hash)
        if moved:
            raise _refuse(
                f"{locked.name} changed {', '.join(moved)} since it was last listed: review the"
                " new text, then approve again.",
                status=409,
                code="changed_since_listed",
            )
        for name in chosen:
            row = rows[name]
            row.pinned_hash = row.description_hash
            row.pinned_description = row.description
            row.pinned_schema = row.input_schema
            row.save(update_fields=["pinned_hash", "pinned_description", "pinned_schema"])
        McpServer.objects.filter(pk=locked.pk).update(
            status=_status(locked), pinned_version=locked.version, approved_at=timezone.now()
        )
        audit.record_by(
            AuditEvent.Kind.MCP_CHANGED,
            actor,
            server=locked.name,
            change="approved",
            tools={name: rows[name].description_hash for name in sorted(chosen)},
        )
    locked.refresh_from_db()
    return locked


def update(
    *,
    server: McpServer,
    trusted: bool | None = None,
    effects: dict[str, str] | None = None,
    actor: audit.Actor,
) -> McpServer:
    """The owner's trust in the server's output, and the effect class of its tools."""
    effects = effects or {}
    bad = {name: effect for name, effect in effects.items() if effect not in EFFECTS}
    if bad:
        raise _refuse(
            f"Unknown effect class for {', '.join(sorted(bad))}:"
            f" one of {', '.join(sorted(EFFECTS))}.",
            status=422,
        )
    with transaction.atomic():
        locked = McpServer.objects.select_for_update().get(pk=server.pk)
        rows = {row.name: row for row in McpTool.objects.filter(server=locked)}
        unknown = sorted(set(effects) - set(rows))
        if unknown:
            raise _refuse(f"{locked.name} has no tool named {', '.join(unknown)}.", status=422)
        for name, effect in effects.items():
            McpTool.objects.filter(pk=rows[name].pk).update(effect=effect)
        if trusted is not None:
            McpServer.objects.filter(pk=locked.pk).update(trusted=trusted)
        audit.record_by(
            AuditEvent.Kind.MCP_CHANGED,
            actor,
            server=locked.name,
            change="updated",
            trusted=trusted,
            effects=effects,
        )
    locked.refresh_from_db()
    return locked


# --- Reading -------------------------------------------------------------------------------------


def _text(description: str, schema: Any) -> list[str]:
    body = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False)
    return [*description.split("\n"), "", "input schema:", *body.split("\n")]


def diff(tool: McpTool) -> str:
    """The pinned text against the listed one, as git writes a diff (`agentos.core.diffs`)."""
    if not tool.pinned or tool.pinned_hash == tool.description_hash:
        return ""
    old = _text(tool.pinned_description, tool.pinned_schema)
    new = _text(tool.description, tool.input_schema) if tool.listed else []
    lines = difflib.unified_diff(old, new, f"a/{tool.name}", f"b/{tool.name}", lineterm="")
    return "\n".join([f"diff --git a/{tool.name} b/{tool.name}", *lines]) + "\n"


def enabled_tools(names: list[str]) -> Callable[[], list[tuple[McpServer, McpTool]]]:
    """(server, tool) of the enabled tools of the servers `names`, for freezing into a run."""

    def load() -> list[tuple[McpServer, McpTool]]:
        rows = McpTool.objects.filter(server__name__in=names, listed=True).select_related("server")
        return [(row.server, row) for row in rows if row.enabled]

    return load
