"""What the harness keeps about tools: the owner's permission rules, and which version of each
file a run last saw (the freshness check of edits)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Decision(models.TextChoices):
    DENY = "deny", _("deny")
    ASK = "ask", _("ask the owner")
    ALLOW = "allow", _("allow")


class PermissionRule(models.Model):
    """deny → ask → allow: the first matching deny wins, then ask, then allow (docs/design.md §13).

    `pattern` is a shell-style glob over the call's subject (a path relative to the workspace,
    a command line, `remote branch` for a push...). Protected paths are refused before any rule
    is read: no rule opens them.
    """

    project = models.ForeignKey(
        "missions.Project",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="permission_rules",
        help_text=_("Empty: every project."),
    )
    tool = models.CharField(_("tool"), max_length=100, help_text=_("A tool name, or * for all."))
    pattern = models.CharField(
        _("pattern"), max_length=500, default="*", help_text=_("Glob over the call's subject.")
    )
    decision = models.CharField(_("decision"), max_length=10, choices=Decision.choices)
    note = models.CharField(_("note"), max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=100, default="owner")

    class Meta:
        ordering = ["project_id", "tool", "pattern"]

    def __str__(self) -> str:
        scope = self.project.name if self.project is not None else "all projects"
        return f"{self.decision} {self.tool} {self.pattern} ({scope})"


class FileView(models.Model):
    """The content hash of a file as the run last read or wrote it.

    `pending_sha256` is written before the harness writes the file: a write replayed after a
    crash that finds the file already at that hash knows its own effect landed.
    """

    run = models.ForeignKey("kernel.Run", on_delete=models.CASCADE, related_name="file_views")
    path = models.CharField(max_length=1000)
    sha256 = models.CharField(max_length=64, blank=True)
    pending_sha256 = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "path"], name="file_view_unique")]

    def __str__(self) -> str:
        return f"{self.path} as run {self.run_id} last saw it"


class CredentialKind(models.TextChoices):
    TOKEN = "token", _("token (HTTPS)")
    SSH_KEY = "ssh_key", _("SSH private key")


class RemoteCredential(models.Model):
    """How the host reaches a remote of a project's repository when it pushes. Encrypted by the
    vault; set through the admin (write-only) and read only by `tools.remotes.credentials`."""

    project = models.ForeignKey(
        "missions.Project", on_delete=models.CASCADE, related_name="remote_credentials"
    )
    remote = models.CharField(_("remote"), max_length=100, default="origin")
    kind = models.CharField(_("kind"), max_length=10, choices=CredentialKind.choices)
    username = models.CharField(
        _("user name"), max_length=200, blank=True, help_text=_("For a token over HTTPS.")
    )
    ciphertext = models.BinaryField(editable=False)
    hint = models.CharField(max_length=8, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "remote"], name="remote_credential_unique")
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.remote} of {self.project}"


# The MCP servers' models live with their package; imported here so the app registers them.
from tools.mcp.models import McpServer as McpServer  # noqa: E402
from tools.mcp.models import McpTool as McpTool  # noqa: E402
