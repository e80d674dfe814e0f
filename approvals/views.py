"""Console pages: the approvals queue, one approval (approve, refuse, always allow), one question.

Decisions go through `approvals.service`, as the API's do. After a decision the page redirects
to itself, which then shows the outcome from the row (a reload never decides twice).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_safe

from agentos.core import audit
from agentos.core.diffs import diff_files, diff_lines
from agentos.core.errors import DomainError
from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from approvals import inbox, service
from approvals.forms import AnswerForm, DecisionForm, VerdictForm
from approvals.models import Approval, Question, Reconciliation, Status, Verdict
from tools import registry
from tools.mcp import toolset as mcp_toolset


@require_safe
@owner_required
def queue(request: HttpRequest) -> HttpResponse:
    context = {
        "screen": SCREENS_BY_SLUG["approvals"],
        "waiting": inbox.waiting(limit=100),
        "settled": inbox.settled(limit=20),
    }
    template = "approvals/queue.html#lists" if request.htmx else "approvals/queue.html"  # type: ignore[attr-defined]
    return render(request, template, context)


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def approval(request: HttpRequest, approval_id: int) -> HttpResponse:
    found = _approval(approval_id)
    form = DecisionForm(request.POST or None)
    error, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            decision = form.cleaned_data["decision"]
            try:
                service.decide(
                    found.pk,
                    approve=decision in ("approve", "always"),
                    args_hash=form.cleaned_data["args_hash"],
                    always=decision == "always",
                    note=form.cleaned_data["note"],
                    username=request.user.get_username(),
                    address=audit.client_address(request),
                )
            except DomainError as refused:
                found = _approval(approval_id)
                error, status = _decision_error(refused, found.run_id), refused.status
            else:
                return redirect("console:approval", approval_id=found.pk)
        else:
            error, status = _("The decision was not understood; decide again."), 400
    return render(
        request,
        "approvals/approval.html",
        _approval_context(found, form=form, error=error),
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def question(request: HttpRequest, question_id: int) -> HttpResponse:
    found = _question(question_id)
    form = AnswerForm(request.POST or None)
    error, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            try:
                service.answer(
                    found.pk,
                    text=form.cleaned_data["text"],
                    username=request.user.get_username(),
                    address=audit.client_address(request),
                )
            except DomainError as refused:
                found = _question(question_id)
                error, status = _decision_error(refused, found.run_id), refused.status
            else:
                return redirect("console:question", question_id=found.pk)
        else:
            status = 400
    request_ = found.question if isinstance(found.question, dict) else {}
    answer = found.answer.get("text") if isinstance(found.answer, dict) else None
    context = {
        "screen": SCREENS_BY_SLUG["approvals"],
        "question": found,
        "text": str(request_.get("text", "")),
        "choices": [str(choice) for choice in request_.get("choices") or []],
        "answer": answer,
        "form": form,
        "error": error,
        "status_label": Status(found.status).label,
        "is_pending": found.status == Status.PENDING,
    }
    return render(request, "approvals/question.html", context, status=status)


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def reconciliation(request: HttpRequest, reconciliation_id: int) -> HttpResponse:
    """An unknown outcome: what is known of the interrupted call, and the three answers."""
    found = _reconciliation(reconciliation_id)
    form = VerdictForm(request.POST or None)
    error, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            try:
                service.settle(
                    found.pk,
                    verdict=form.cleaned_data["verdict"],
                    result=form.cleaned_data["result"]
                    if form.cleaned_data["verdict"] == Verdict.HAPPENED
                    else "",
                    username=request.user.get_username(),
                    address=audit.client_address(request),
                )
            except DomainError as refused:
                found = _reconciliation(reconciliation_id)
                error, status = _decision_error(refused, found.run_id), refused.status
            else:
                return redirect("console:reconciliation", reconciliation_id=found.pk)
        else:
            error, status = _("The verdict was not understood; answer again."), 400
    step = inbox.steps_of([found]).get((found.run_id, found.seq))
    call = inbox.call_of(step)
    question = found.question if isinstance(found.question, dict) else {}
    answer = found.answer if isinstance(found.answer, dict) else {}
    result = answer.get("result")
    context = {
        "screen": SCREENS_BY_SLUG["approvals"],
        "wait": found,
        "step": step,
        "tool": call["tool"],
        "subject": inbox.subject(call),
        "call": json.dumps(call, indent=2, ensure_ascii=False, sort_keys=True),
        # A probe that ran and found nothing is reported by the kernel in the question.
        "probe": question.get("probe"),
        "verdict": found.verdict,
        "verdict_label": Verdict(found.verdict).label if found.verdict else "",
        "result": result.get("output") if isinstance(result, dict) else None,
        "status_label": Status(found.status).label,
        "is_pending": found.status == Status.PENDING,
        "form": form,
        "error": error,
    }
    return render(request, "approvals/reconciliation.html", context, status=status)


def _reconciliation(reconciliation_id: int) -> Reconciliation:
    found = (
        Reconciliation.objects.select_related("run__account__mission")
        .filter(pk=reconciliation_id)
        .first()
    )
    if found is None:
        raise Http404(_("No such unknown outcome."))
    return found


def _approval(approval_id: int) -> Approval:
    found = Approval.objects.select_related("run__account__mission").filter(pk=approval_id).first()
    if found is None:
        raise Http404(_("No such approval."))
    return found


def _question(question_id: int) -> Question:
    found = Question.objects.select_related("run__account__mission").filter(pk=question_id).first()
    if found is None:
        raise Http404(_("No such question."))
    return found


def _decision_error(refused: DomainError, run_id: int) -> str:
    """The refusal of the service (`ApprovalError`) or of the kernel under it (a wait already
    settled or expired), in the owner's words (they speak of waits and hashes)."""
    messages = {
        "closed": _(
            "Run %(run)s was stopped, which closed this: nothing was approved, refused or"
            " answered, and nothing will run."
        )
        % {"run": run_id},
        "already_settled": _("This was already settled, perhaps from another device."),
        "expired": _("This expired before your decision: no answer in time counts as a refusal."),
        "hash_mismatch": _(
            "The call changed since this page was shown. Read it again before deciding."
        ),
    }
    return messages.get(refused.code, refused.message)


# Parts of a preview shown in their own sections rather than as facts.
PREVIEW_PARTS = {
    "diff",
    "message",
    "author",
    "commits",
    "files_not_shown",
    "full_diff_cut",
    "files",
    "files_total",
    "diff_truncated",
    "diff_chars",
    "full_diff",
}


# What a call is bound to, shown only on demand: the owner checks them rarely, and they push
# what matters below the fold of a phone.
RAW_HASHES = ("commit", "parent", "tree", "head", "remote_was")


def _project(approval: Approval) -> Any:
    """The project the call acts on, read through the run's mission (missions sit above
    approvals: this module does not import them)."""
    mission = getattr(getattr(approval.run, "account", None), "mission", None)
    project = getattr(mission, "project", None)
    if project is None or project.pk != approval.request.get("project_id"):
        return None
    return project


def _approval_context(
    approval: Approval, *, form: DecisionForm, error: str | None
) -> dict[str, Any]:
    request = approval.request
    tool_name = str(request.get("tool", ""))
    arguments = request.get("arguments")
    preview = request.get("preview")
    preview = preview if isinstance(preview, dict) else {}
    diff, hidden = diff_lines(str(preview.get("diff") or ""))
    project = _project(approval)
    files = preview.get("files") if isinstance(preview.get("files"), list) else []
    answer = approval.answer if isinstance(approval.answer, dict) else {}
    status = approval.status
    return {
        "screen": SCREENS_BY_SLUG["approvals"],
        "approval": approval,
        "status": status,
        "status_label": Status(status).label,
        "is_pending": status == Status.PENDING,
        "tool": tool_name,
        "sentence": inbox.sentence(request, project.name if project else None),
        "subject": inbox.subject(request),
        "call": json.dumps(
            {"tool": tool_name, "arguments": arguments}, indent=2, ensure_ascii=False
        ),
        "args_hash": str(request.get("args_hash", "")),
        "risk": str(request.get("risk", "")),
        "justification": str(request.get("justification", "")),
        # Why the harness asks whatever the rules say: the run's tree already did two of three.
        "rule_of_two": [str(line) for line in request.get("rule_of_two") or []],
        "diff": diff,
        "diff_files": diff_files(diff, files or [], complete=_lists_all(preview, files or [])),
        "diff_hidden": hidden,
        # What the call is bound to besides its arguments (a push's commit and tree...), as facts.
        "preview_facts": [
            (k, v)
            for k, v in sorted(preview.items())
            if k not in PREVIEW_PARTS and k not in RAW_HASHES and v
        ],
        "hashes": [(k, preview[k]) for k in RAW_HASHES if preview.get(k)],
        "commits": str(preview.get("commits") or ""),
        "message": str(preview.get("message") or ""),
        "author": str(preview.get("author") or ""),
        "files_not_shown": preview.get("files_not_shown") or 0,
        "full_diff_cut": bool(preview.get("full_diff_cut")),
        "files": files,
        "files_total": preview.get("files_total"),
        "diff_truncated": bool(preview.get("diff_truncated")),
        "diff_chars": preview.get("diff_chars"),
        "full_diff": preview.get("full_diff")
        if isinstance(preview.get("full_diff"), str)
        else None,
        "project": project,
        # "Always allow" writes a project rule for this tool and subject: only when both exist.
        "can_always": project is not None
        and (registry.TOOLS.get(tool_name) or mcp_toolset.by_name(tool_name)) is not None,
        "answer": answer,
        "form": form,
        "error": error,
    }


def _lists_all(preview: dict[str, Any], files: list[Any]) -> bool:
    """Whether the preview lists every changed file (it stops at a cap)."""
    total = preview.get("files_total")
    return not isinstance(total, int) or total <= len(files)
