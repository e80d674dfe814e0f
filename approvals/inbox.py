"""What waits for the owner and what was settled lately: the read side of approvals and
questions, shared by the console and the API. Decisions go through `approvals.service`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from approvals.models import Approval, Question, Reconciliation, Status, Verdict
from kernel import programs
from kernel.models import TERMINAL, Run, Step, WaitState
from tools import registry
from tools.mcp import toolset as mcp_toolset

SUBJECT_CHARS = 120
MISSION_CHARS = 80
ONE_LINE = re.compile(r"[ \t\n]+")


def pending() -> Q:
    """Open, not past due, on a run that goes on: a wait the kernel has not yet marked expired
    is already expired to the owner once its time is up, and one left open on a run that ended
    or is stopping is closed (`Approval.status` says the same)."""
    return (
        Q(state=WaitState.OPEN)
        & (Q(due_at__isnull=True) | Q(due_at__gt=timezone.now()))
        & Q(run__cancel_requested=False)
        & ~Q(run__status__in=TERMINAL)
    )


def approvals(*, pending_only: bool) -> QuerySet[Approval]:
    found = Approval.objects.select_related("run__account__mission").order_by("-created_at", "-id")
    return found.filter(pending()) if pending_only else found


def questions(*, pending_only: bool) -> QuerySet[Question]:
    found = Question.objects.select_related("run__account__mission").order_by("-created_at", "-id")
    return found.filter(pending()) if pending_only else found


def reconciliations(*, pending_only: bool) -> QuerySet[Reconciliation]:
    found = Reconciliation.objects.select_related("run__account__mission").order_by(
        "-created_at", "-id"
    )
    return found.filter(pending()) if pending_only else found


def needing_migration() -> QuerySet[Run]:
    """Unfinished runs parked because no program here resumes their engine version."""
    return (
        Run.objects.filter(needs_migration=True)
        .exclude(status__in=TERMINAL)
        .exclude(cancel_requested=True)
        .select_related("account__mission")
        .order_by("-created_at", "-id")
    )


def steps_of(waits: list[Reconciliation]) -> dict[tuple[int, int], Step]:
    """The interrupted steps of these reconciliations, in one query."""
    if not waits:
        return {}
    wanted = Q()
    for wait in waits:
        wanted |= Q(run_id=wait.run_id, seq=wait.seq)
    return {(step.run_id, step.seq): step for step in Step.objects.filter(wanted)}


def call_of(step: Step | None) -> dict[str, Any]:
    """The exact call of an interrupted step: its tool (or step name) and arguments."""
    if step is None:
        return {"tool": "", "arguments": {}}
    request = step.request if isinstance(step.request, dict) else {}
    arguments = request.get("arguments", request)
    return {"tool": step.name, "arguments": arguments if isinstance(arguments, dict) else {}}


def subject(request: dict[str, Any]) -> str:
    """One line saying what an approval is about: the tool's own subject (the command, the
    path, the remote and branch), else its arguments."""
    name = str(request.get("tool", ""))
    tool = registry.TOOLS.get(name) or mcp_toolset.by_name(name)
    arguments = request.get("arguments")
    if tool is not None and isinstance(arguments, dict):
        text = tool.subject_of(arguments)
    else:
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
    return one_line(text, SUBJECT_CHARS)


def sentence(request: dict[str, Any], project: str | None) -> str:
    """What approving will do, in one sentence the owner reads first ("Push 2 commits to origin
    main of project demo"); the tools the owner meets most often are said in words, any other
    by its name and subject."""
    tool = str(request.get("tool", ""))
    arguments = request.get("arguments")
    arguments = arguments if isinstance(arguments, dict) else {}
    preview = request.get("preview")
    preview = preview if isinstance(preview, dict) else {}
    where = {"project": project or ""}
    if tool == "git_push":
        target = {"remote": arguments.get("remote", "origin"), "branch": arguments.get("branch")}
        # One commit a line, as git wrote them: a subject may hold a form feed or U+2028.
        commits = [line for line in str(preview.get("commits") or "").split("\n") if line]
        if "message" in preview:  # a push sends the one commit made for it
            text = _("Push one commit to %(remote)s %(branch)s") % target
        elif commits:
            text = ngettext(
                "Push %(count)d commit to %(remote)s %(branch)s",
                "Push %(count)d commits to %(remote)s %(branch)s",
                len(commits),
            ) % {"count": len(commits), **target}
        else:
            text = _("Push to %(remote)s %(branch)s") % target
        if project:
            text = _("%(action)s of project %(project)s") % {"action": text, **where}
        return text
    if tool == "request_approval":
        return _("Do what the agent describes: %(action)s") % {
            "action": one_line(str(arguments.get("action", "")), SUBJECT_CHARS)
        }
    words = {
        "shell": _("Run a command"),
        "git_commit": _("Commit to the run's branch"),
        "write_file": _("Write a file"),
        "edit_file": _("Edit a file"),
    }
    text = words.get(tool) or _("Use %(tool)s on “%(subject)s”") % {
        "tool": tool,
        "subject": subject(request),
    }
    if project:
        text = _("%(action)s in project %(project)s") % {"action": text, **where}
    return text


def one_line(text: str, chars: int) -> str:
    """`text` on one line: its runs of spaces, tabs and newlines as one space. Any other break
    (`\r`, U+2028...) stays, for the page to show as a marker: `str.split()` would turn it into
    a space and hide it."""
    return Truncator(" ".join(ONE_LINE.split(text.strip(" \t\n")))).chars(chars)


def goal_of(run: Run) -> str:
    """The goal of the run's mission; empty for a run charged to a kernel account that is not a
    mission (the kernel's own workloads)."""
    mission = getattr(run.account, "mission", None)
    return mission.goal if mission is not None else ""


@dataclass(frozen=True)
class Item:
    """A row of a console list: an approval or a question, in the owner's terms."""

    kind: Literal["approval", "question", "reconciliation", "migration"]
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
        # What approving does, in words ("Run a command"), not the tool's name: the mission is
        # on the line below it.
        title=sentence(approval.request, None),
        subject=subject(approval.request),
        mission=one_line(goal_of(approval.run), MISSION_CHARS),
        mission_id=approval.run.account_id,
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
        mission=one_line(goal_of(question.run), MISSION_CHARS),
        mission_id=question.run.account_id,
        created_at=question.created_at,
        due_at=question.due_at,
        settled_at=question.settled_at,
        url=reverse("console:question", args=[question.pk]),
    )


def reconciliation_item(wait: Reconciliation, step: Step | None) -> Item:
    verdict = wait.verdict
    return Item(
        kind="reconciliation",
        pk=wait.pk,
        status=wait.status,
        status_label=str(Verdict(verdict).label) if verdict else str(Status(wait.status).label),
        title=step.name if step is not None else "",
        subject=subject(call_of(step)),
        mission=one_line(goal_of(wait.run), MISSION_CHARS),
        mission_id=wait.run.account_id,
        created_at=wait.created_at,
        due_at=None,
        settled_at=wait.settled_at,
        url=reverse("console:reconciliation", args=[wait.pk]),
    )


def migration_item(run: Run) -> Item:
    return Item(
        kind="migration",
        pk=run.pk,
        status="needs_migration",
        status_label=_("needs migration"),
        title=run.program,
        subject=_(
            "Run %(run)s was recorded by engine version %(recorded)s; no program of version"
            " %(current)s resumes it."
        )
        % {
            "run": run.pk,
            "recorded": run.engine_version or "?",
            "current": programs.ENGINE_VERSION,
        },
        mission=one_line(goal_of(run), MISSION_CHARS),
        mission_id=run.account_id,
        created_at=run.created_at,
        due_at=None,
        settled_at=None,
        url=reverse("console:run", args=[run.pk]),
    )


def _reconciliation_items(found: list[Reconciliation]) -> list[Item]:
    steps = steps_of(found)
    return [reconciliation_item(wait, steps.get((wait.run_id, wait.seq))) for wait in found]


@dataclass(frozen=True)
class Collected:
    items: list[Item]
    more: int  # how many more match than `items` shows
    collected_at: datetime


def waiting(*, limit: int = 20) -> Collected:
    """Pending approvals, questions, unknown outcomes and runs needing a migration together,
    newest first (Home's "Waiting for you")."""
    collected_at = timezone.now()
    found = [approval_item(a) for a in approvals(pending_only=True)[: limit + 1]]
    found += [question_item(q) for q in questions(pending_only=True)[: limit + 1]]
    found += _reconciliation_items(list(reconciliations(pending_only=True)[: limit + 1]))
    found += [migration_item(run) for run in needing_migration()[: limit + 1]]
    found.sort(key=lambda item: (item.created_at, item.pk), reverse=True)
    total = len(found)
    if total > limit:
        total = (
            approvals(pending_only=True).count()
            + questions(pending_only=True).count()
            + reconciliations(pending_only=True).count()
            + needing_migration().count()
        )
    return Collected(found[:limit], max(0, total - limit), collected_at)


def settled(*, limit: int = 20) -> Collected:
    """Recently decided, answered or expired approvals, questions and unknown outcomes, latest
    first."""
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
    found += _reconciliation_items(
        list(reconciliations(pending_only=False).exclude(pending()).order_by(latest, "-id")[:limit])
    )
    found.sort(key=lambda item: item.settled_at or item.due_at or item.created_at, reverse=True)
    return Collected(found[:limit], 0, collected_at)
