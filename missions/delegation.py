"""Delegation: the `delegate` tool, through which an agent hands tasks to sub-agents under typed
contracts (`missions.contracts`), each ending with a result envelope (`missions.envelopes`), and
`consult_advisor`, a delegation of one question to a stronger model.

A call carries 1 to 12 contracts. The tool, as journaled steps of the parent's run:

1. plans (one `delegate-plan` step, `contracts.plan`): validates every contract against what the
   parent may give and routes each child. Any refusal is one precise error result the parent's
   model reads; nothing is spawned;
2. for writers, checkpoints the parent's worktree (the child's worktree is made from it);
3. spawns each child (one spawn step each: a replay finds the children it made, never makes
   another, and a child that ended is never run again);
4. joins them (a durable wait: the parent leaves its worker until they all end);
5. records the children's result envelopes as the call's result — data, as the kernel records a
   tool's output, never instructions — built from each child's status: its own envelope when it
   ended `done`, else one saying plainly why not (its budget, its failure, its refusal).

Limits the kernel holds: the depth of a run tree (`runs.MAX_DEPTH`), the account's concurrency
(a mission's `max_concurrent_runs`: children beyond it wait in the queue), the global cap on
running runs (`GlobalBudget.max_running_runs`), and the budget of every subtree (a child's spend
is debited to its ancestors with each of its steps).
"""

from __future__ import annotations

import json
from typing import Any

from kernel.context import Done, RunContext, StepCall
from kernel.models import Effect, Run, StepKind
from missions import contracts
from missions.contracts import ADVISOR, CONTRACT_SCHEMA, NAME
from missions.engine import harness, relief
from missions.envelopes import envelope_of
from tools.base import Risk, Tool, ToolEnv, ToolError, Worksite

MAX_TASKS = 12


def _not_here(env: ToolEnv, arguments: dict[str, Any]) -> str:
    raise RuntimeError("delegate runs through `interact`")  # pragma: no cover


# --- the tool ------------------------------------------------------------------------------------


def _delegate(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    tasks = arguments["tasks"]
    plan = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name="delegate-plan",
        request={"tasks": tasks},
        execute=lambda call: Done(contracts.plan(ctx, worksite, tasks)),
    )
    if "refused" in plan:
        raise ToolError(plan["refused"])
    children: list[dict[str, Any]] = plan["children"]
    if any(child["input"]["contract"]["writes"] for child in children):
        if worksite.workspace is None:  # the plan refuses writers without one
            raise ToolError("delegate: this run has no workspace to give writers.")
        # The writers start from the parent's files as they are now, uncommitted edits included.
        checkpoint = harness._checkpoint(ctx, worksite.workspace, NAME)
        base = {"run": ctx.run_id, "workspace": str(worksite.workspace), **checkpoint}
        for child in children:
            if child["input"]["contract"]["writes"]:
                child["input"]["contract"]["base_checkpoint"] = base
    ids = [ctx.spawn("agent", child["input"], caps=child["caps"]) for child in children]
    ctx.join(ids)
    names = [child["input"]["contract"]["name"] for child in children]

    def gather(call: StepCall) -> Done:
        envelopes = [
            envelope_of(Run.objects.get(pk=run_id), name)
            for run_id, name in zip(ids, names, strict=True)
        ]
        text = json.dumps(envelopes, ensure_ascii=False, indent=1)
        return Done({"output": relief.offload(text, tool=NAME, run=ctx.run), "is_error": False})

    # A tool call's step: the envelopes reach the model as data (the trust the kernel records
    # for a tool's output), and a replay renders the bytes recorded here.
    result = ctx.step(
        StepKind.TOOL_CALL, effect=Effect.READ, name=NAME, request={"runs": ids}, execute=gather
    )
    return str(result["output"])


DELEGATE = Tool(
    name=NAME,
    description=(
        "Hand tasks to sub-agents, each under a contract (objective, done criteria, tools,"
        " budget, output schema), and wait for their results: one result envelope per task"
        " (status, payload, artifacts, evidence, open questions, error). Independent tasks in one"
        " call run in parallel. Read-only workers by default; `writes: true` gives a worker its"
        " own worktree of your current files and a branch for you to merge."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "items": CONTRACT_SCHEMA,
                "minItems": 1,
                "maxItems": MAX_TASKS,
            }
        },
        "required": ["tasks"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_delegate,
)


# --- the advisor ---------------------------------------------------------------------------------

ADVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"advice": {"type": "string", "minLength": 1}},
    "required": ["advice"],
}


def _consult(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    """The advisor shape: a cheaper executor asks the planner's model — the strongest the
    routes name — one question. A delegation of one read-only task, so the advisor is a
    sub-agent like any other: its own run, budget and envelope; it sees only what is asked and
    the references given, and reads files with the asker's read tools."""
    task = {
        "name": "advisor",
        "objective": "Advise another agent, who asks: " + arguments["question"],
        "role": "planner",
        "context": list(arguments.get("context", [])),
        "boundaries": ["Advise only: change nothing."],
        "output_schema": ADVICE_SCHEMA,
        "done_criteria": ["The advice answers the question asked, with its reasons."],
    }
    return _delegate(ctx, worksite, {"tasks": [task]})


CONSULT = Tool(
    name=ADVISOR,
    description=(
        "Ask a stronger model for advice on one question (a plan, a hard bug, a decision):"
        " it reads what you point it to and answers in an envelope whose payload is"
        " {advice}. It costs more per token than you: ask when stuck or before a risky step."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": 20_000},
            "context": CONTRACT_SCHEMA["properties"]["context"],
        },
        "required": ["question"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_consult,
)
