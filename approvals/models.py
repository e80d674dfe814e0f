"""Approvals and owner questions are the kernel's durable human waits, seen from the owner's side.

One row, one truth: the wait holds the request (its question) and the owner's decision (its
answer); these proxies only name and filter them. A run waiting for the owner is this row, not a
blocked process, so an answer days later wakes it like any other.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from kernel.models import TERMINAL, Wait, WaitKind, WaitState
from kernel.runs import STOPPED_MARK


class Status(models.TextChoices):
    PENDING = "pending", _("waiting for you")
    APPROVED = "approved", _("approved")
    REFUSED = "refused", _("refused")
    EXPIRED = "expired", _("expired (refused)")
    ANSWERED = "answered", _("answered")
    CLOSED = "closed", _("closed: the run was stopped")


class _PastDue:
    due_at: Any
    state: str
    answer: Any
    run: Any

    @property
    def is_past_due(self) -> bool:
        # The kernel marks a wait expired when it looks at the run; to the owner it is already.
        return self.due_at is not None and self.due_at <= timezone.now()

    @property
    def is_closed(self) -> bool:
        """Ended with its run: closed when the run was stopped (`kernel.runs.request_stop`), or
        left open on a run that has ended or is stopping (stopped before waits ended with it)."""
        if self.state == WaitState.OPEN:
            return self.run.cancel_requested or self.run.status in TERMINAL
        return (
            self.state == WaitState.EXPIRED
            and isinstance(self.answer, dict)
            and STOPPED_MARK in self.answer
        )


class ApprovalManager(models.Manager["Approval"]):
    def get_queryset(self) -> models.QuerySet[Approval]:
        return super().get_queryset().filter(kind=WaitKind.HUMAN, question__type="approval")


class QuestionManager(models.Manager["Question"]):
    def get_queryset(self) -> models.QuerySet[Question]:
        return super().get_queryset().filter(kind=WaitKind.HUMAN, question__type="question")


class Approval(_PastDue, Wait):
    """A tool call (or an action the agent names) that needs the owner's yes."""

    objects: ClassVar[ApprovalManager] = ApprovalManager()

    class Meta:
        proxy = True
        verbose_name = _("approval")

    @property
    def request(self) -> dict[str, Any]:
        return self.question if isinstance(self.question, dict) else {}

    @property
    def status(self) -> str:
        if self.is_closed:
            return Status.CLOSED
        if self.state == WaitState.OPEN:
            return Status.EXPIRED if self.is_past_due else Status.PENDING
        if self.state == WaitState.EXPIRED:
            return Status.EXPIRED
        approved = isinstance(self.answer, dict) and self.answer.get("approved") is True
        return Status.APPROVED if approved else Status.REFUSED


class Question(_PastDue, Wait):
    """A question the agent asked the owner (`ask_owner`)."""

    objects: ClassVar[QuestionManager] = QuestionManager()

    class Meta:
        proxy = True
        verbose_name = _("question")

    @property
    def status(self) -> str:
        if self.is_closed:
            return Status.CLOSED
        if self.state == WaitState.OPEN and self.is_past_due:
            return Status.EXPIRED
        if self.state == WaitState.OPEN:
            return Status.PENDING
        return Status.EXPIRED if self.state == WaitState.EXPIRED else Status.ANSWERED


class ReconciliationManager(models.Manager["Reconciliation"]):
    def get_queryset(self) -> models.QuerySet[Reconciliation]:
        return super().get_queryset().filter(kind=WaitKind.RECONCILE)


class Verdict(models.TextChoices):
    """The owner's answers to an unknown outcome (`approvals.service.settle`)."""

    HAPPENED = "happened", _("it happened")
    NOT_HAPPENED = "not_happened", _("it did not: run it again")
    STOP = "stop", _("stop the run")


class Reconciliation(Wait):
    """A step that cannot safely be repeated was interrupted and nothing could check whether it
    took effect: the run waits for the owner's verdict (the kernel opens it, never expiring)."""

    objects: ClassVar[ReconciliationManager] = ReconciliationManager()

    class Meta:
        proxy = True
        verbose_name = _("unknown outcome")

    @property
    def status(self) -> str:
        if self.state == WaitState.EXPIRED:  # it never expires: its run was stopped
            return Status.CLOSED
        return Status.PENDING if self.state == WaitState.OPEN else Status.ANSWERED

    @property
    def verdict(self) -> str | None:
        """The owner's verdict, once given."""
        if self.state == WaitState.OPEN or not isinstance(self.answer, dict):
            return None
        verdict = self.answer.get("owner_verdict")
        return str(verdict) if verdict in Verdict.values else None


# --- what the owner is told ---------------------------------------------------------------------


class Told(models.TextChoices):
    """What the owner is told of (`approvals.notifications`), each set off, at once or in the
    daily digest in Settings."""

    WAITING = "waiting", _("Something waits for you (an approval, a question, an unknown outcome)")
    MISSION_DONE = "mission_done", _("A mission is done")
    MISSION_FAILED = "mission_failed", _("A mission failed")
    MISSION_BLOCKED = "mission_blocked", _("A mission is blocked")
    MISSION_CANCELLED = "mission_cancelled", _("A mission was cancelled")
    MISSION_CAPPED = "mission_capped", _("A mission was stopped by a cap")
    CAP_NEAR = "cap_near", _("A cap is 80 % used")
    PROVIDER_WAIT = "provider_wait", _("A run waits on a provider for more than an hour")
    AGENT_MESSAGE = "agent_message", _("An agent's message to you")
    DIGEST = "digest", _("The daily digest")


class Delivery(models.TextChoices):
    PUSH = "push", _("pushed at once")
    DIGEST = "digest", _("kept for the daily digest")
    HOME = "home", _("on the Home screen only")


class Notification(models.Model):
    """One thing the owner is told of: written once (its `key` names what it tells of), listed
    on the Home screen until read, and pushed to the owner's devices as `delivery` says.

    Rows are derived from the event stream under the push cursor's lock, in the transaction
    that moves the cursor (`approvals.notifications.derive`): a crash neither loses nor doubles
    one. `claimed_until` is the lease of the process posting it (`deliver`)."""

    key = models.CharField(max_length=120, unique=True)
    kind = models.CharField(max_length=20, choices=Told.choices)
    title = models.CharField(max_length=120)
    body = models.CharField(max_length=300, blank=True)
    # A path of the console: the screen to act on, opened by a tap on the notification.
    url = models.CharField(max_length=300)
    account_id = models.BigIntegerField(null=True, blank=True)
    run_id = models.BigIntegerField(null=True, blank=True)
    # A wait for the owner: not pushed once it is settled (it no longer waits).
    wait_id = models.BigIntegerField(null=True, blank=True)
    delivery = models.CharField(max_length=10, choices=Delivery.choices)
    created_at = models.DateTimeField(default=timezone.now)
    claimed_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    pushed_at = models.DateTimeField(null=True, blank=True)
    digested_at = models.DateTimeField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            # The pushes still to make (`deliver`), the digest's rows, the Home card.
            models.Index(
                fields=["id"],
                name="notification_to_push",
                condition=models.Q(delivery="push", pushed_at__isnull=True),
            ),
            models.Index(
                fields=["id"],
                name="notification_to_digest",
                condition=models.Q(delivery="digest", digested_at__isnull=True),
            ),
            models.Index(
                fields=["-created_at"],
                name="notification_unread",
                condition=models.Q(read_at__isnull=True),
            ),
            models.Index(
                fields=["account_id", "kind", "-created_at"], name="notification_by_mission"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.title}"


class Mode(models.TextChoices):
    OFF = "off", _("Off")
    NOW = "now", _("At once")
    DIGEST = "digest", _("In the daily digest")


class NotificationSettings(models.Model):
    """The owner's choices (one row, pk 1): per kind, off, at once or in the daily digest; the
    digest's hour in the owner's time zone. Off still lists the outcome on the Home screen."""

    modes = models.JSONField(default=dict, blank=True)
    digest_hour = models.PositiveSmallIntegerField(default=18)
    time_zone = models.CharField(max_length=60, default="UTC")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("notification settings")
        verbose_name_plural = _("notification settings")

    def __str__(self) -> str:
        return "notification settings"

    def mode(self, kind: str) -> str:
        chosen = self.modes.get(kind) if isinstance(self.modes, dict) else None
        return chosen if chosen in Mode.values else Mode.NOW
