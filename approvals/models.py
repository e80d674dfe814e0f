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
