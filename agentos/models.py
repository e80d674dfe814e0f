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

    Written only through `agentos.audit.record`; the admin shows it read-only.
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


# Declared beside the code that uses it; imported here so that Django registers it.
from agentos.idempotency import IdempotencyKey  # noqa: E402

__all__ = ["ApiToken", "AuditEvent", "IdempotencyKey", "Scope", "SignInThrottle"]
