"""Owner access: personal API tokens and the security audit log."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Scope(models.TextChoices):
    """What a token may do: GET needs `read`, any write `act`, and deciding an approval or
    answering an owner question `approve` (given only when asked for: a leaked script token
    must not let an agent's action through)."""

    READ = "read", _("read")
    ACT = "act", _("act")
    APPROVE = "approve", _("approve")


def default_scopes() -> list[str]:
    return [Scope.READ.value, Scope.ACT.value]


class ApiToken(models.Model):
    """A personal token for scripts. Only its SHA-256 digest is stored; the token is shown once."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(_("name"), max_length=80)
    # The first characters of the token, kept to let the owner recognise it in a list.
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(_("expires at"))
    scopes = ArrayField(
        models.CharField(max_length=16, choices=Scope.choices), default=default_scopes
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("API token")

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and self.expires_at > timezone.now()


class SignInThrottle(models.Model):
    """Failed sign-ins of one client address (`username` empty) or of one (address, username),
    and until when the next attempt from there is refused. Rows, not memory: a restart or
    another process does not reset them. Written only by `agentos.signin`."""

    address = models.CharField(max_length=45, blank=True)  # empty: the server saw none
    username = models.CharField(max_length=150, blank=True)
    failures = models.PositiveIntegerField(default=0)
    last_failure_at = models.DateTimeField()
    blocked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["address", "username"], name="signin_throttle_key")
        ]
        # Old rows are swept by age at each failure.
        indexes = [models.Index(fields=["last_failure_at"], name="signin_throttle_age")]

    def __str__(self) -> str:
        return f"{self.address} {self.username or '*'}: {self.failures}"


class AuditEvent(models.Model):
    """Append-only record of security-relevant facts: sign-ins, refusals, token use.

    Written only through `agentos.core.audit.record`; the admin shows it read-only.
    """

    class Kind(models.TextChoices):
        SIGNIN_SUCCEEDED = "signin.succeeded", _("sign-in succeeded")
        SIGNIN_FAILED = "signin.failed", _("sign-in failed")
        SIGNIN_THROTTLED = "signin.throttled", _("sign-in throttled")
        SIGNED_OUT = "signout", _("signed out")
        SESSION_EXPIRED = "session.expired", _("session expired")
        SESSION_UNVERIFIED = "session.unverified", _("session without second factor")
        TOKEN_CREATED = "token.created", _("API token created")
        TOKEN_REVOKED = "token.revoked", _("API token revoked")
        TOKEN_REFUSED = "token.refused", _("API token refused")
        API_UNAUTHENTICATED = "api.unauthenticated", _("API request without credentials")
        API_BAD_INPUT = "api.bad_input", _("API request with bad input")
        WEBSOCKET_REFUSED = "websocket.refused", _("WebSocket refused")
        OWNER_CREATED = "owner.created", _("owner account created")
        OWNER_RESET = "owner.reset", _("owner credentials reset")
        APPROVAL_DECIDED = "approval.decided", _("approval decided")
        QUESTION_ANSWERED = "question.answered", _("owner question answered")
        RECONCILIATION_SETTLED = "reconciliation.settled", _("unknown outcome settled")
        RULE_ADDED = "rule.added", _("permission rule added")
        RULE_REMOVED = "rule.removed", _("permission rule removed")
        KILL_SWITCH = "kill_switch", _("everything stopped (kill switch)")
        POLICY_CHANGED = "policy.changed", _("a role's route or the global budget changed")
        SESSIONS_ENDED = "sessions.ended", _("other sessions signed out")
        SECOND_FACTOR_REFUSED = "second_factor.refused", _("second factor refused")
        DEVICE_ADDED = "device.added", _("authenticator added")
        DEVICE_REMOVED = "device.removed", _("authenticator removed")
        BACKUP_CODES_RENEWED = "backup_codes.renewed", _("backup codes renewed")
        PUSH_SUBSCRIBED = "push.subscribed", _("notifications turned on for a device")
        PUSH_UNSUBSCRIBED = "push.unsubscribed", _("notifications turned off for a device")
        PROVIDER_CHANGED = "provider.changed", _("a provider's key or endpoint changed")
        MEMORY_CHANGED = "memory.changed", _("a memory note added or invalidated by the owner")
        ENVIRONMENT_CHANGED = (
            "environment.changed",
            _("a project's environment setup saved or rebuilt"),
        )
        MCP_CHANGED = "mcp.changed", _("an MCP server added, approved or its trust changed")
        BRIDGE_CHANGED = "bridge.changed", _("an API bridge added, changed or removed")
        PUSH_SENDER_CHANGED = "push.sender", _("the push sender's contact changed")
        REMOTE_CREDENTIAL_CHANGED = "credential.changed", _("a project's push credential set")
        SCHEDULE_CHANGED = "schedule.changed", _("a schedule created, changed or deleted")
        WEBHOOK_CHANGED = (
            "webhook.changed",
            _("a webhook created or deleted, or a delivery replayed"),
        )

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=40, choices=Kind.choices)
    username = models.CharField(max_length=150, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            # The owner browses sign-in history by account and by address.
            models.Index(fields=["kind", "username", "at"], name="audit_kind_user_at"),
            models.Index(fields=["kind", "address", "at"], name="audit_kind_addr_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.kind} {self.username}"


class PushSubscription(models.Model):
    """A browser's Web Push subscription: where to post (its push service's endpoint, itself a
    secret: whoever has it may send) and the keys payloads are encrypted to. Written only by
    `approvals.push`; dropped when the push service says it is gone (404, 410)."""

    endpoint = models.URLField(max_length=1000, unique=True)
    p256dh = models.CharField(max_length=128)
    auth = models.CharField(max_length=64)
    # The browser that subscribed, as it named itself: lets the owner tell devices apart.
    agent = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"push subscription {self.pk} ({self.agent or 'browser'})"


class PushState(models.Model):
    """The one row of Web Push's own state: the VAPID key pair (the private half encrypted by
    the vault, never shown or logged) and how far the event stream was followed. Its row lock
    lets one process at a time advance the cursor (`approvals.notifications.deliver_one`)."""

    vapid_private = models.BinaryField()
    # The public half, url-safe base64 of the uncompressed point: what browsers subscribe with.
    vapid_public = models.CharField(max_length=100)
    # Number of the last stream event looked at (`kernel.stream`); waits opened later notify.
    cursor = models.BigIntegerField(default=0)
    # Who push services may contact about this sender (VAPID `sub`), set in Settings
    # (`approvals.push_sender`); empty: settings.PUSH_CONTACT.
    contact = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return "push state"


# Declared beside the code that uses it; imported here so that Django registers it.
from agentos.core.idempotency import IdempotencyKey  # noqa: E402

__all__ = [
    "ApiToken",
    "AuditEvent",
    "IdempotencyKey",
    "PushState",
    "PushSubscription",
    "Scope",
    "SignInThrottle",
]
