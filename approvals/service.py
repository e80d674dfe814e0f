"""Asking the owner (inside a run) and answering (from the console or the API).

An approval is bound to a hash of the exact tool and arguments, and to what the owner was shown
(a push's commit): the decision must name that hash, and the call runs only if its own
arguments hash the same. Approving X never lets Y through. No answer before expiry is a refusal.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from agentos.core import audit
from agentos.core.models import AuditEvent
from approvals.errors import ApprovalError
from approvals.models import Approval, Question, Reconciliation, Verdict
from kernel import runs
from kernel.context import DONE, NOT_DONE, Done, RunContext, StepCall
from kernel.models import Effect, RunStatus, StepKind
from tools import actions, permissions, registry
from tools.base import Tool, ToolError, Worksite, arguments_hash
from tools.mcp import toolset as mcp_toolset
from tools.models import Decision, PermissionRule

MAX_JUSTIFICATION = 4000


def ttl() -> timedelta:
    return timedelta(hours=settings.APPROVAL_TTL_HOURS)


def ask_approval(
    ctx: RunContext,
    worksite: Worksite,
    tool: Tool,
    arguments: dict[str, Any],
    *,
    justification: str,
    rule_of_two: list[str] | None = None,
) -> dict[str, Any]:
    """Ask the owner to approve this exact call; wait durably. The approval's request (with
    its preview, computed once) when approved, else `{"refused": reason}`. `rule_of_two`: the
    flags the run's tree already set, by what (`kernel.exposure`), when that is why it asks."""

    def build(call: StepCall) -> Done:
        try:
            preview = tool.preview(worksite.env(call), arguments) if tool.preview else {}
        except ToolError as error:
            # Nothing to show, nothing to ask: the model reads why (a remote out of reach...).
            return Done({"type": "approval", "unprepared": str(error)})
        return Done(
            {
                "type": "approval",
                "tool": tool.name,
                "arguments": arguments,
                "args_hash": arguments_hash(tool.name, arguments),
                "risk": str(tool.risk),
                "justification": justification[:MAX_JUSTIFICATION],
                "preview": preview,
                "project_id": worksite.project_id,
                "mission_id": ctx.run.account_id,
                **({"rule_of_two": rule_of_two} if rule_of_two else {}),
            }
        )

    # The request is recorded first, so the wait's question (and a replay of it) is fixed even
    # if the workspace changes afterwards.
    request = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name=f"approval-request:{tool.name}",
        request={"arguments": arguments},
        execute=build,
    )
    if "unprepared" in request:
        return {"refused": f"the approval could not be prepared: {request['unprepared']}"}
    waited = ctx.wait_human(request, expires_in=ttl())
    answer = waited.get("answer") if isinstance(waited, dict) else None
    if not isinstance(answer, dict):
        return {"refused": "no answer before the approval expired"}
    if answer.get("approved") is not True:
        note = f": {answer['note']}" if answer.get("note") else ""
        return {"refused": f"the owner refused{note}"}
    if answer.get("args_hash") != request["args_hash"]:
        return {"refused": "the approval does not match this call"}
    return dict(request)


def ask_question(ctx: RunContext, text: str, *, choices: list[str] | None = None) -> str:
    waited = ctx.wait_human(
        {
            "type": "question",
            "text": text,
            "choices": choices or [],
            "mission_id": ctx.run.account_id,
        },
        expires_in=ttl(),
    )
    answer = waited.get("answer") if isinstance(waited, dict) else None
    if not isinstance(answer, dict):
        return "The owner did not answer before the question expired."
    return str(answer.get("text", ""))


def decide(
    approval_id: int,
    *,
    approve: bool,
    args_hash: str,
    always: bool = False,
    note: str = "",
    by: str = "owner",
    username: str = "",
    address: str | None = None,
) -> Approval:
    """Record the owner's decision on an open approval and wake its run.

    `args_hash` must be the request's own: the owner decides on what they were shown. The
    decision also goes to the security log (`AuditEvent`), in the same transaction: what the
    owner let an agent do, and from where, is kept apart from the runs it concerns.
    """
    with transaction.atomic():
        approval: Approval | None = (
            Approval.objects.select_for_update().filter(pk=approval_id).first()
        )
        if approval is None:
            raise ApprovalError(f"No approval {approval_id}.", code="not_found", status=404)
        _refuse_closed(approval, "nothing was approved or refused")
        expected = approval.request.get("args_hash")
        if args_hash != expected:
            raise ApprovalError(
                "args_hash does not match this approval's call: refresh it and decide on what it"
                " shows now.",
                code="hash_mismatch",
                status=409,
            )
        if always and not approve:
            raise ApprovalError("'always' applies to an approval only.", code="invalid_input")
        runs.answer_wait(
            approval.pk,
            answer={"approved": approve, "args_hash": args_hash, "always": always, "note": note},
            by=by,
        )
        if always:
            _always_allow(approval, audit.Actor(by=by, username=username, address=address))
        audit.record(
            AuditEvent.Kind.APPROVAL_DECIDED,
            username=username,
            address=address,
            by=by,
            approval=approval.pk,
            run=approval.run_id,
            tool=approval.request.get("tool", ""),
            args_hash=args_hash,
            approved=approve,
            always=always,
        )
    return Approval.objects.get(pk=approval.pk)


def answer(
    question_id: int,
    *,
    text: str,
    by: str = "owner",
    username: str = "",
    address: str | None = None,
) -> Question:
    """Answer an open question and wake its run; the security log keeps who answered, from
    where (not the text: it is in the journal), in the same transaction."""
    if not text.strip():
        raise ApprovalError("An answer cannot be empty.", code="invalid_input")
    with transaction.atomic():
        question = Question.objects.select_for_update().filter(pk=question_id).first()
        if question is None:
            raise ApprovalError(f"No question {question_id}.", code="not_found", status=404)
        _refuse_closed(question, "the answer was not sent")
        runs.answer_wait(question_id, answer={"text": text}, by=by)
        audit.record(
            AuditEvent.Kind.QUESTION_ANSWERED,
            username=username,
            address=address,
            question=question.pk,
            run=question.run_id,
            by=by,
        )
    return Question.objects.get(pk=question_id)


def settle(
    reconciliation_id: int,
    *,
    verdict: str,
    result: str = "",
    by: str = "owner",
    username: str = "",
    address: str | None = None,
) -> Reconciliation:
    """The owner's verdict on an unknown outcome, and its run woken.

    - happened: the step is recorded as done with `result` (settled by the owner), as a tool's
      result is shaped (`{"output": text, "is_error": false}`);
    - not_happened: the step runs again, once (the kernel asks again if that attempt is cut
      short too);
    - stop: the run is stopped through the kernel's stop path.
    The security log keeps who decided what, from where, in the same transaction.
    """
    if verdict not in Verdict.values:
        raise ApprovalError(
            f"A verdict is one of {', '.join(Verdict.values)}, not {verdict!r}.",
            code="invalid_input",
        )
    if result and verdict != Verdict.HAPPENED:
        raise ApprovalError("Only 'happened' takes a result.", code="invalid_input")
    with transaction.atomic():
        found = Reconciliation.objects.filter(pk=reconciliation_id).first()
        if found is None:
            raise ApprovalError(
                f"No unknown outcome {reconciliation_id}.", code="not_found", status=404
            )
        # What `kernel.context.RunContext._reconcile` reads, and the verdict as the owner gave it.
        kernel_verdict: dict[str, Any]
        if verdict == Verdict.HAPPENED:
            kernel_verdict = {"verdict": DONE, "result": {"output": result, "is_error": False}}
        elif verdict == Verdict.NOT_HAPPENED:
            kernel_verdict = {"verdict": NOT_DONE}
        else:  # the run is stopped below; its step is never settled
            kernel_verdict = {"verdict": "stop"}
        runs.answer_wait(found.pk, answer={**kernel_verdict, "owner_verdict": verdict}, by=by)
        if verdict == Verdict.STOP:
            runs.request_stop(found.run_id, reason=RunStatus.CANCELLED, by=by)
        audit.record(
            AuditEvent.Kind.RECONCILIATION_SETTLED,
            username=username,
            address=address,
            by=by,
            reconciliation=found.pk,
            run=found.run_id,
            step=found.seq,
            verdict=verdict,
        )
    return Reconciliation.objects.get(pk=found.pk)


def _refuse_closed(wait: Approval | Question, consequence: str) -> None:
    """A wait that ended with its run (stopped) is not answered: said as such, not as a wait
    "already settled" (the owner did not settle it)."""
    if wait.is_closed:
        raise ApprovalError(
            f"Run {wait.run_id} was stopped, which closed this; {consequence}.",
            code="closed",
            status=409,
        )


def _always_allow(approval: Approval, actor: audit.Actor) -> None:
    request = approval.request
    name = str(request.get("tool", ""))
    tool = registry.TOOLS.get(name) or mcp_toolset.by_name(name)
    if tool is None or request.get("project_id") is None:
        raise ApprovalError("This approval cannot become a project rule.", code="invalid_input")
    rule = PermissionRule(
        project_id=request["project_id"],
        tool=tool.name,
        pattern=permissions.always_allow_pattern(tool, request["arguments"]),
        decision=Decision.ALLOW,
        note=f"'always allow' on approval {approval.pk}",
    )
    actions.add_permission_rule(rule=rule, actor=actor)
