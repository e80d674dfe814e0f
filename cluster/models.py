"""The node registry: the machines that run steps, each attempt of a step on one of them, and
the control plane's SSH key.

Rows are written by `cluster.nodes` (registry, key, telemetry) and `cluster.placement`
(placements); the admin only shows them.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

# The control plane's own node: reached in-process (no SSH), present in every install.
LOCAL = "local"

# A DNS-label-like name: it appears in paths on the node (`--node NAME`) and in the forced command.
NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"


class Node(models.Model):
    class Status(models.TextChoices):
        UNKNOWN = "unknown"  # registered, never answered yet
        UP = "up"  # answered `hello` at `telemetry_at`
        LOST = "lost"  # a call to it failed in transport (unreachable, connection dropped)

    name = models.CharField(
        max_length=63,
        unique=True,
        validators=[RegexValidator(NAME_PATTERN, "lowercase letters, digits and inner dashes")],
    )
    # Empty for `local` only.
    address = models.CharField(max_length=255, blank=True)
    port = models.PositiveIntegerField(
        default=22, validators=[MinValueValidator(1), MaxValueValidator(65535)]
    )
    ssh_user = models.CharField(max_length=32, default="root")
    # The pinned host key, one OpenSSH public-key line ("ssh-ed25519 AAAA…"); a node whose server
    # shows another key is refused (no trust on first use).
    host_key = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.UNKNOWN)
    # The runner's last `hello` answer (telemetry, levels, sandboxes) and when we got it.
    telemetry = models.JSONField(default=dict, blank=True)
    telemetry_at = models.DateTimeField(null=True, blank=True)
    runner_version = models.CharField(max_length=64, blank=True)
    # The sandbox levels the runner said are available.
    levels = models.JSONField(default=list, blank=True)
    lost_at = models.DateTimeField(null=True, blank=True)
    lost_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL

    @property
    def telemetry_values(self) -> dict[str, Any]:
        values = self.telemetry.get("telemetry") if isinstance(self.telemetry, dict) else None
        return values if isinstance(values, dict) else {}


class Placement(models.Model):
    """One attempt of a step on a node. A step placed again (its node lost) gets a new row with
    the next fence and the SAME idempotency key: the runners refuse the older fence, and a runner
    that already stored the key's result answers it without running again."""

    class Status(models.TextChoices):
        RUNNING = "running"  # sent to the node, no answer yet
        DONE = "done"  # the runner answered a result (whatever the command's exit code)
        LOST = "lost"  # the node was lost before it answered
        REFUSED = "refused"  # the runner refused the request (stale fence, invalid, busy)
        # Still running when the step was placed again: its caller died (a worker killed) and a
        # later attempt took over under a higher fence.
        ABANDONED = "abandoned"

    step_id = models.CharField(max_length=200)
    key = models.CharField(max_length=200)
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="placements")
    fence = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    # What the runner answered it used, so a run records the versions it ran with.
    runner_version = models.CharField(max_length=64, blank=True)
    environment = models.CharField(max_length=200, blank=True)
    replayed = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["step_id", "fence"]
        constraints = [
            # The fence counter per step: two placements racing for one fence, one loses.
            models.UniqueConstraint(fields=["step_id", "fence"], name="placement_step_fence"),
        ]
        indexes = [models.Index(fields=["node", "status"], name="placement_node_status")]

    def __str__(self) -> str:
        return f"{self.step_id}#{self.fence}@{self.node_id}"


class ControlKey(models.Model):
    """The control plane's SSH private key (one row), encrypted by the vault."""

    # Always 1: one key for the whole control plane (two processes making it at once, one wins).
    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    ciphertext = models.BinaryField()
    # The OpenSSH public line ("ssh-ed25519 AAAA… agentos-control-plane"), not secret.
    public_line = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="control_key_single")]

    def __str__(self) -> str:
        return self.public_line


class ApiBridge(models.Model):
    """An API the owner lets runs call without holding its key: inside a sandbox (or through
    `cluster.outbound`), `http://<name>.bridge/<path>` reaches `base_url/<path>` with the
    credential header added by the egress service (`cluster.egress`). The secret is encrypted by
    the vault, written through `cluster.bridges.put` and read only there."""

    name = models.CharField(
        max_length=31,
        unique=True,
        validators=[
            RegexValidator(r"^[a-z][a-z0-9-]{0,30}$", "a lowercase letter, then a-z 0-9 -")
        ],
    )
    base_url = models.URLField(max_length=500)
    header = models.CharField(max_length=100, default="Authorization")
    # How the header's value is made from the secret: "Bearer {secret}", "{secret}"...
    template = models.CharField(max_length=200, default="Bearer {secret}")
    ciphertext = models.BinaryField(editable=False)
    hint = models.CharField(max_length=8, blank=True, editable=False)
    # What one call costs, counted against the calling run's caps (0: free or unknown).
    usd_micros_per_call = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"bridge {self.name} → {self.base_url}"
