"""Owner tools: ask a question, request an approval, notify. They talk to the owner through the
kernel's durable waits and events, so the run leaves its worker while it waits. Registered with
the tool registry by the app (`ApprovalsConfig.ready`)."""

from __future__ import annotations

from typing import Any

from approvals.notifications import AGENT_PUSH_MINUTES
from approvals.service import ask_approval, ask_question
from kernel import journal
from kernel.context import Done, RunContext
from kernel.models import Effect, StepKind
from tools.base import Risk, Tool, ToolEnv, Worksite


def _not_here(env: ToolEnv, arguments: dict[str, Any]) -> str:
    raise RuntimeError("owner tools run through `interact`")  # pragma: no cover


def _ask(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    answer = ask_question(ctx, arguments["question"], choices=arguments.get("choices"))
    return f"The owner answered: {answer}"


def _request_approval(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    outcome = ask_approval(
        ctx, worksite, REQUEST_APPROVAL, arguments, justification=arguments["justification"]
    )
    if "refused" in outcome:
        return f"Not approved: {outcome['refused']}."
    return "Approved by the owner."


def _notify(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    def send(call: Any) -> Done:
        journal.append_event(
            "owner.notified",
            run_id=ctx.run_id,
            account_id=ctx.run.account_id,
            seq=call.seq,
            message=arguments["message"],
        )
        return Done({"sent": True})

    ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name="notify-owner",
        request=arguments,
        execute=send,
    )
    return "The owner was notified."


ASK_OWNER = Tool(
    name="ask_owner",
    description="Ask the owner a question and wait for the answer (it may take hours).",
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": 4000},
            "choices": {
                "type": "array",
                "items": {"type": "string", "maxLength": 200},
                "maxItems": 10,
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_ask,
)
REQUEST_APPROVAL = Tool(
    name="request_approval",
    description=(
        "Ask the owner to approve an action you describe, before doing it outside the tools"
        " that ask by themselves."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "action": {"type": "string", "minLength": 1, "maxLength": 2000},
            "justification": {"type": "string", "minLength": 1, "maxLength": 4000},
        },
        "required": ["action", "justification"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_request_approval,
    subject=lambda arguments: str(arguments.get("action", "")),
)
NOTIFY_OWNER = Tool(
    name="notify_owner",
    description=(
        "Tell the owner something worth knowing now (no answer expected). Their phone is told"
        f" at most once every {AGENT_PUSH_MINUTES} minutes per mission; later messages wait on"
        " their Home screen."
    ),
    input_schema={
        "type": "object",
        "properties": {"message": {"type": "string", "minLength": 1, "maxLength": 4000}},
        "required": ["message"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_notify,
)

OWNER_TOOLS = [ASK_OWNER, REQUEST_APPROVAL, NOTIFY_OWNER]
