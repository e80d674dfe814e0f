"""Approvals, owner questions and unknown outcomes over /api/v1: list, read, decide, answer.

Decisions and answers go through `approvals.service`, as the console's do; its refusals
(`ApprovalError`: unknown id, stale hash; the kernel's: already settled, expired) become the API's
error shape in `agentos.api`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from pydantic import ConfigDict, StrictBool

from agentos.core import audit, tokens
from agentos.core.schemas import Text
from approvals import inbox, service
from approvals.errors import ApprovalError
from approvals.models import Approval, Question, Reconciliation

router = Router(tags=["approvals"])

StatusName = Literal["pending", "approved", "refused", "expired", "answered", "closed"]


class ListFilter(Schema):
    status: Literal["pending", "all"] = "pending"
    limit: int = Field(100, ge=1, le=500)


class ApprovalOut(Schema):
    id: int
    status: StatusName
    tool: str
    arguments: dict[str, Any]
    args_hash: str
    risk: str
    justification: str
    preview: dict[str, Any]
    project_id: int | None
    mission_id: int
    run_id: int
    created_at: datetime
    due_at: datetime | None
    decided_at: datetime | None
    answer: dict[str, Any] | None  # the decision as recorded: approved, args_hash, always, note


class QuestionOut(Schema):
    id: int
    status: StatusName
    text: str
    choices: list[str]
    mission_id: int
    run_id: int
    created_at: datetime
    due_at: datetime | None
    answered_at: datetime | None
    answer: str | None


class CallOut(Schema):
    tool: str = Field(description="The tool (or step) the interrupted call made")
    arguments: dict[str, Any]


class ReconciliationOut(Schema):
    type: Literal["reconciliation"] = "reconciliation"
    id: int
    status: Literal["pending", "answered", "closed"]
    mission_id: int
    run_id: int
    seq: int = Field(description="The interrupted step")
    call: CallOut
    effect: str
    started_at: datetime | None = Field(description="When the step's intent was recorded")
    probe: str | None = Field(description="What a check of the call found; null: it has none")
    verdict: Literal["happened", "not_happened", "stop"] | None
    result: str | None = Field(description="The result the owner gave with 'happened'")
    created_at: datetime
    answered_at: datetime | None


class VerdictIn(Schema):
    model_config = ConfigDict(extra="forbid")

    verdict: Literal["happened", "not_happened", "stop"] = Field(
        description="happened: record the step as done with `result`; not_happened: run it"
        " again, once; stop: stop the run"
    )
    result: Text = Field("", max_length=10000, description="With 'happened' only")


class DecisionIn(Schema):
    # A decision is an explicit JSON boolean, never a string or a number coerced into one.
    model_config = ConfigDict(extra="forbid")

    approve: StrictBool
    args_hash: Text = Field(max_length=128)
    always: StrictBool = False
    note: Text = Field("", max_length=2000)


class AnswerIn(Schema):
    model_config = ConfigDict(extra="forbid")

    text: Text = Field(max_length=10000)


def _username(request: HttpRequest) -> str:
    # The owner behind the session or the token (ninja's `request.auth`); with a token,
    # `request.user` is anonymous.
    user = getattr(request, "auth", None) or request.user
    return str(user.get_username())


def approval_out(approval: Approval) -> dict[str, Any]:
    request = approval.request
    arguments = request.get("arguments")
    preview = request.get("preview")
    return {
        "id": approval.pk,
        "status": approval.status,
        "tool": str(request.get("tool", "")),
        "arguments": arguments if isinstance(arguments, dict) else {},
        "args_hash": str(request.get("args_hash", "")),
        "risk": str(request.get("risk", "")),
        "justification": str(request.get("justification", "")),
        "preview": preview if isinstance(preview, dict) else {},
        "project_id": request.get("project_id"),
        "mission_id": approval.run.account_id,
        "run_id": approval.run_id,
        "created_at": approval.created_at,
        "due_at": approval.due_at,
        "decided_at": approval.settled_at,
        "answer": approval.answer if isinstance(approval.answer, dict) else None,
    }


def question_out(question: Question) -> dict[str, Any]:
    request = question.question if isinstance(question.question, dict) else {}
    answer = question.answer.get("text") if isinstance(question.answer, dict) else None
    return {
        "id": question.pk,
        "status": question.status,
        "text": str(request.get("text", "")),
        "choices": [str(choice) for choice in request.get("choices") or []],
        "mission_id": question.run.account_id,
        "run_id": question.run_id,
        "created_at": question.created_at,
        "due_at": question.due_at,
        "answered_at": question.settled_at,
        "answer": None if answer is None else str(answer),
    }


def reconciliation_out(wait: Reconciliation) -> dict[str, Any]:
    step = inbox.steps_of([wait]).get((wait.run_id, wait.seq))
    question = wait.question if isinstance(wait.question, dict) else {}
    answer = wait.answer if isinstance(wait.answer, dict) else {}
    result = answer.get("result") if wait.verdict == "happened" else None
    probe = question.get("probe")
    return {
        "id": wait.pk,
        "status": wait.status,
        "mission_id": wait.run.account_id,
        "run_id": wait.run_id,
        "seq": wait.seq,
        "call": inbox.call_of(step),
        "effect": step.effect if step is not None else "",
        "started_at": step.started_at if step is not None else None,
        "probe": None if probe is None else str(probe),
        "verdict": wait.verdict,
        "result": str(result.get("output", "")) if isinstance(result, dict) else None,
        "created_at": wait.created_at,
        "answered_at": wait.settled_at,
    }


@router.get(
    "/approvals", response=list[ApprovalOut], summary="Approvals, newest first (pending by default)"
)
def list_approvals(request: HttpRequest, filters: Query[ListFilter]) -> list[dict[str, Any]]:
    found = inbox.approvals(pending_only=filters.status == "pending")[: filters.limit]
    return [approval_out(approval) for approval in found]


@router.get("/approvals/{approval_id}", response=ApprovalOut, summary="One approval")
def get_approval(request: HttpRequest, approval_id: int) -> dict[str, Any]:
    approval = Approval.objects.select_related("run").filter(pk=approval_id).first()
    if approval is None:
        raise ApprovalError(f"No approval {approval_id}.", code="not_found", status=404)
    return approval_out(approval)


@router.post(
    "/approvals/{approval_id}/decision",
    response=ApprovalOut,
    summary="Approve or refuse the exact call (name its args_hash); wakes the run",
)
def decide(request: HttpRequest, approval_id: int, payload: DecisionIn) -> dict[str, Any]:
    # A token decides with the `approve` scope (agentos.core.scopes); the log names it.
    service.decide(
        approval_id,
        approve=payload.approve,
        args_hash=payload.args_hash,
        always=payload.always,
        note=payload.note,
        by=tokens.actor(request),
        username=_username(request),
        address=audit.client_address(request),
    )
    return approval_out(Approval.objects.select_related("run").get(pk=approval_id))


@router.get(
    "/questions", response=list[QuestionOut], summary="Owner questions, newest first (pending)"
)
def list_questions(request: HttpRequest, filters: Query[ListFilter]) -> list[dict[str, Any]]:
    found = inbox.questions(pending_only=filters.status == "pending")[: filters.limit]
    return [question_out(question) for question in found]


@router.get("/questions/{question_id}", response=QuestionOut, summary="One owner question")
def get_question(request: HttpRequest, question_id: int) -> dict[str, Any]:
    question = Question.objects.select_related("run").filter(pk=question_id).first()
    if question is None:
        raise ApprovalError(f"No question {question_id}.", code="not_found", status=404)
    return question_out(question)


@router.post(
    "/questions/{question_id}/answer",
    response=QuestionOut,
    summary="Answer a question; wakes the run",
)
def answer(request: HttpRequest, question_id: int, payload: AnswerIn) -> dict[str, Any]:
    service.answer(
        question_id,
        text=payload.text,
        by=tokens.actor(request),
        username=_username(request),
        address=audit.client_address(request),
    )
    return question_out(Question.objects.select_related("run").get(pk=question_id))


@router.get(
    "/reconciliations",
    response=list[ReconciliationOut],
    summary="Unknown outcomes: interrupted calls that cannot be repeated safely (pending)",
)
def list_reconciliations(request: HttpRequest, filters: Query[ListFilter]) -> list[dict[str, Any]]:
    found = inbox.reconciliations(pending_only=filters.status == "pending")[: filters.limit]
    return [reconciliation_out(wait) for wait in found]


@router.get(
    "/reconciliations/{reconciliation_id}",
    response=ReconciliationOut,
    summary="One unknown outcome",
)
def get_reconciliation(request: HttpRequest, reconciliation_id: int) -> dict[str, Any]:
    found = Reconciliation.objects.select_related("run").filter(pk=reconciliation_id).first()
    if found is None:
        raise ApprovalError(
            f"No unknown outcome {reconciliation_id}.", code="not_found", status=404
        )
    return reconciliation_out(found)


@router.post(
    "/reconciliations/{reconciliation_id}/verdict",
    response=ReconciliationOut,
    summary="Say whether the interrupted call happened, to run it again, or to stop; wakes the run",
)
def settle(request: HttpRequest, reconciliation_id: int, payload: VerdictIn) -> dict[str, Any]:
    service.settle(
        reconciliation_id,
        verdict=payload.verdict,
        result=payload.result,
        by=tokens.actor(request),
        username=_username(request),
        address=audit.client_address(request),
    )
    return reconciliation_out(
        Reconciliation.objects.select_related("run").get(pk=reconciliation_id)
    )
