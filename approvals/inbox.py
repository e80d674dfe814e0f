"""What waits for the owner and what was settled lately: the read side of approvals and
questions, shared by the console and the API. Decisions go through `approvals.service`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator

from approvals.models import Approval, Question, Status
from kernel.models import WaitState
from tools import registry

SUBJECT_CHARS = 120
MISSION_CHARS = 80


def pending() -> Q:
    """Open and not past due: a wait the kernel has not yet marked expired is already expired
    to the owner once its time is up (`Approval.status` says the same)."""
    return Q(state=WaitState.OPEN) & (Q(due_at__isnull=True) | Q(due_at__gt=timezone.now()))


def approvals(*, pending_only: bool) -> QuerySet[Approval]:
    found = Approval.objects.select_related("run__mission").order_by("-created_at", "-id")
    return found.filter(pending()) if pending_only else found


def questions(*, pending_only: bool) -> QuerySet[Question]:
    found = Question.objects.select_related("run__mission").order_by("-created_at", "-id")
    return found.filter(pending()) if pending_only else found


def subject(request: dict[str, Any]) -> str:
    """One line saying what an approval is about: the tool's own subject (the command, the
    path, the remote and branch), else its arguments."""
    tool = registry.get(str(request.get("tool", "")))
    arguments = request.get("arguments")
    if tool is not None and isinstance(arguments, dict):
        text = tool.subject_of(arguments)
    else:
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    return one_line(text, SUBJECT_CHARS)


def one_line(text: str, chars: int) -> str:
    return Truncator(" ".join(text.split())).chars(chars)


@dataclass(frozen=True)
class Item:
    """A row of a console list: an approval or a question, in the owner's terms."""

    kind: Literal["approval", "question"]
    pk: int
    status: str
    status_label: str
    title: str
    subject: str
    mission: str
    mission_id: int
    created_at: datetime
    due_at: datetime | None
    settled_at: datetime | None
    url: str


def approval_item(approval: Approval) -> Item:
    return Item(
        kind="approval",
        pk=approval.pk,
        status=approval.status,
        status_label=str(Status(approval.status).label),
        title=str(approval.request.get("tool", "")),
        subject=subject(approval.request),
        mission=one_line(approval.run.mission.goal, MISSION_CHARS),
        mission_id=approval.run.mission_id,
        created_at=approval.created_at,
        due_at=approval.due_at,
        settled_at=approval.settled_at,
        url=reverse("console:approval", args=[approval.pk]),
    )


def question_item(question: Question) -> Item:
    request = question.question if isinstance(question.question, dict) else {}
    return Item(
        kind="question",
        pk=question.pk,
        status=question.status,
        status_label=str(Status(question.status).label),
        title="",  # the template names it: "Question"
        subject=one_line(str(request.get("text", "")), SUBJECT_CHARS),
        mission=one_line(question.run.mission.goal, MISSION_CHARS),
        mission_id=question.run.mission_id,
        created_at=question.created_at,
        due_at=question.due_at,
        settled_at=question.settled_at,
        url=reverse("console:question", args=[question.pk]),
    )


@dataclass(frozen=True)
class Collected:
    items: list[Item]
    more: int  # how many more match than `items` shows
    collected_at: datetime


def waiting(*, limit: int = 20) -> Collected:
    """Pending approvals and questions together, newest first (Home's "Waiting for you")."""
    collected_at = timezone.now()
    found = [approval_item(a) for a in approvals(pending_only=True)[: limit + 1]]
    found += [question_item(q) for q in questions(pending_only=True)[: limit + 1]]
    found.sort(key=lambda item: (item.created_at, item.pk), reverse=True)
    total = len(found)
    if total > limit:
        total = approvals(pending_only=True).count() + questions(pending_only=True).count()
    return Collected(found[:limit], max(0, total - limit), collected_at)


def settled(*, limit: int = 20) -> Collected:
    """Recently decided, answered or expired approvals and questions, latest first."""
    collected_at = timezone.now()
    # When it was settled; one that expired unseen (still open, past due) at its due time.
    latest = Coalesce("settled_at", "due_at", "created_at").desc()
    found = [
        approval_item(a)
        for a in approvals(pending_only=False).exclude(pending()).order_by(latest, "-id")[:limit]
    ]
    found += [
        question_item(q)
        for q in questions(pending_only=False).exclude(pending()).order_by(latest, "-id")[:limit]
    ]
    found.sort(key=lambda item: item.settled_at or item.due_at or item.created_at, reverse=True)
    return Collected(found[:limit], 0, collected_at)
