"""MCP servers the owner registered and the tools each one lists, with what the owner approved
(the pin): a tool is offered to agents only while what its server lists now is what was pinned.

Written only through `tools.mcp.servers` (register, list, approve, set trust and effects)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from kernel.models import Effect

NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,30}$"


def description_hash(name: str, description: str, schema: dict[str, Any]) -> str:
    """What a pin binds: sha256 of the canonical JSON of the tool's name, description and input
    schema. A change to any of the three is a new tool as far as the owner is concerned."""
    body = json.dumps(
        {"name": name, "description": description, "input_schema": schema},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(body.encode()).hexdigest()


class Transport(models.TextChoices):
    STDIO = "stdio", _("stdio (a command in the sandbox)")
    HTTP = "http", _("streamable HTTP (through the egress proxy)")


class ServerStatus(models.TextChoices):
    PENDING = "pending", _("pending: never approved")
    READY = "ready", _("ready")
    CHANGED = "changed", _("changed since approved")
    ERROR = "error", _("error")


# What the owner sees of a server (the API's answer, the admin's form), in this order.
SHOWN_FIELDS = (
    "name",
    "transport",
    "command",
    "url",
    "level",
    "environment",
    "bridge",
    "trusted",
    "status",
    "last_error",
    "version",
    "pinned_version",
    "listed_at",
    "approved_at",
)


class McpServer(models.Model):
    name = models.CharField(_("name"), max_length=31, unique=True)
    transport = models.CharField(_("transport"), max_length=10, choices=Transport.choices)
    command = models.JSONField(_("command (argv)"), default=list, blank=True)
    url = models.CharField(_("URL"), max_length=500, blank=True)
    level = models.PositiveSmallIntegerField(_("sandbox level"), default=1)
    # A project whose frozen environment is mounted at /env (`cluster.environments`).
    environment = models.CharField(_("environment (project)"), max_length=120, blank=True)
    # An egress bridge whose credentials the proxy adds to the server's requests.
    bridge = models.CharField(_("bridge"), max_length=31, blank=True)
    trusted = models.BooleanField(
        _("trusted"),
        default=False,
        help_text=_("Its output reaches agents as a tool's, not framed as content from outside."),
    )
    status = models.CharField(
        _("status"), max_length=10, choices=ServerStatus.choices, default=ServerStatus.PENDING
    )
    last_error = models.TextField(_("last error"), blank=True)
    # What the server says it is (its implementation name and version), and what the owner
    # approved: a new version shows in the server's page until approved again.
    version = models.CharField(_("version"), max_length=200, blank=True)
    pinned_version = models.CharField(_("approved version"), max_length=200, blank=True)
    listed_at = models.DateTimeField(null=True, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("MCP server")

    def __str__(self) -> str:
        return self.name


class McpTool(models.Model):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(_("name"), max_length=128)
    description = models.TextField(_("description"), blank=True)
    input_schema = models.JSONField(_("input schema"), default=dict)
    description_hash = models.CharField(max_length=64)
    # What the owner approved; empty: never approved.
    pinned_hash = models.CharField(max_length=64, blank=True)
    pinned_description = models.TextField(blank=True)
    pinned_schema = models.JSONField(null=True, blank=True)
    effect = models.CharField(
        _("effect class"),
        max_length=20,
        choices=[(e.value, e.label) for e in Effect if e != Effect.MODEL_CALL],
        default=Effect.NON_IDEMPOTENT,
    )
    # False when the server's latest listing no longer has it.
    listed = models.BooleanField(default=True)

    class Meta:
        ordering = ["server_id", "name"]
        verbose_name = _("MCP tool")
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_unique")]

    def __str__(self) -> str:
        return f"{self.server.name}/{self.name}"

    @property
    def pinned(self) -> bool:
        return bool(self.pinned_hash)

    @property
    def enabled(self) -> bool:
        return self.listed and self.pinned and self.pinned_hash == self.description_hash
