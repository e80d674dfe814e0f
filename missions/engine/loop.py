"""The agent loop: a kernel program. A turn = one model response + its tool calls.

Every model response and every tool call is a journaled kernel step, so a run resumed after a
crash replays recorded responses without calling the model again, and continues at the first
step without a result. The conversation is rebuilt from recorded results, in the provider's
native format, and only ever appended to.

Ends: an answer without tool calls → `done`; a refusal → `blocked`; the turn cap → `partial`;
budgets and cancellation → the kernel's `budget_exhausted` / `cancelled`; a permanent provider
error or a bad run input → `failed` with the precise error.

A stop or an owner's interrupt closes the connection of an answer still streaming (the step's
stop signal cuts it, `missions.providers.cutting`); the step records it as cut, with nothing of
its text (`model_call.cut_short`). After a stop the run ends before its next step; after an
interrupt the owner has the turn: the model is asked again once a message of theirs is there to
deliver.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field, replace
from typing import Any

from cluster import warm
from kernel.context import Done, RunContext, StepCall
from kernel.exceptions import StepFailed, Suspend
from kernel.models import Effect, RunStatus, StepKind
from kernel.programs import Outcome
from memory import tasks as memory_tasks
from missions import steering
from missions.engine import deltas, fingerprint, framing, harness, model_call, resume, stalls
from missions.engine.prompt import assemble
from missions.engine.spec import (
    MAX_STOP_REFUSALS,
    STOP_HOOK_PREFIX,
    STOP_HOOKS,
    ContextStopHook,
    Spec,
    StopCheck,
)
from missions.engine.window import Window, append_user_text, from_owner, give_memory, memory_scope
from missions.providers import registry
from missions.providers.base import Conversation, Options, Provider
from tools import registry as tool_registry
from tools.base import Risk, Tool, Worksite
from tools.mcp import sessions as mcp_sessions
from tools.mcp import toolset as mcp_toolset
from tools.models import Decision

NO_TOOL = Tool(
    name="",
    description="",
    input_schema={},
    effect=Effect.READ,
    risk=Risk.READ,
    run=lambda call, arguments: "",
)


def agent(ctx: RunContext) -> Outcome:
    """The agent program: its loop, then its project's memory consolidated (in the background:
    a pass is cheap to repeat, so a replayed end asks again without harm)."""
    outcome = _agent(ctx)
    memory_tasks.consolidate_soon(memory_scope(ctx), why=f"run {ctx.run_id} ended")
    return outcome


@dataclass
class Agent:
    """What the loop carries from one turn to the next, within one execution of a run."""

    ctx: RunContext
    spec: Spec
    provider: Provider
    window: Window
    by_name: dict[str, Tool]
    worksite: Worksite
    watch: stalls.Watch | None
    refusals: int = 0
    # Look for owner messages at the first model call of this execution (they may have come
    # while the run waited), then only when the kernel says something arrived.
    look: bool = True
    # The last answer was cut short by the owner's interrupt: the turn is theirs, and the next
    # model step waits for their message (`_model_step`).
    handed: bool = False
    # Why each action outside (`Risk.EXTERNAL`: a push...) did not happen, by tool, while its
    # last call did not: a run that set out to act and was refused does not end `done`.
    undone: dict[str, str] = field(default_factory=dict)
    # This execution began with steps in the journal (a resume): the resume routine runs at the
    # first turn boundary at the journal's end (`resume.before_turn`).
    reclaimed: bool = False
    # It planned units (`resume.after_tools`): each turn begins with the watch on their budget.
    units: bool = False


def _agent(ctx: RunContext) -> Outcome:
    spec = Spec.from_input(ctx.input)
    run = _start(ctx, spec)
    resume.at_start(run)
    try:
        for number in range(1, spec.max_turns + 1):
            outcome = turn(run, number)
            if outcome is not None:
                return outcome
        return Outcome(RunStatus.PARTIAL, {"reason": f"turn cap {spec.max_turns} reached"})
    finally:
        # Its MCP servers stop with it (or with this execution: a resumed run starts them again).
        if spec.mcp_tools:
            mcp_sessions.POOL.close_run(ctx.run_id)
        # And its warm level-2 VMs (an execution that resumes boots a fresh one): its commands'
        # and its browser's (`web_fetch` with `render`, at any level).
        if spec.sandbox_level >= 2 or "web_fetch" in spec.tools:
            warm.release(ctx.run_id)


def _start(ctx: RunContext, spec: Spec) -> Agent:
    """The run's prompt, provider, opening thread, worksite and window (its steps in this order:
    the prompt's fingerprint, the worksite's, the window's)."""
    reclaimed = bool(ctx.records)  # before this execution's first step
    names = list(spec.tools)
    mcp = mcp_toolset.build(spec.mcp_tools)  # deferred, after the registry's: a stable order
    if mcp or any((tool_registry.TOOLS.get(name) or NO_TOOL).deferred for name in names):
        names.append("load_tool_schema")
    tools = tool_registry.frozen(names) + mcp
    prefix = assemble(
        role=spec.role,
        instructions=spec.instructions,
        memory_index=spec.memory_index,
        tools=tools,
        data_framing=spec.data_framing,
        memory_as_data=spec.memory_as_data,
    )
    fingerprint.record(ctx, prefix)
    provider = registry.build(spec.provider, script=spec.script)
    options = Options(
        model=spec.model,
        max_output_tokens=spec.max_output_tokens,
        effort=spec.effort,  # type: ignore[arg-type]  # validated by the routing layer
        thinking=spec.thinking,
        cache_key=f"agentos-run-{ctx.run_id}",
    )
    conversation = Conversation(
        provider=provider.name, system=prefix.system, items=[provider.user_message(spec.goal)]
    )
    give_memory(provider, conversation.items, spec)
    worksite = harness.worksite(ctx, spec.repository, spec.base, spec.sandbox_level)
    window = Window.open(ctx, provider, spec, prefix, options, conversation)
    return Agent(
        ctx=ctx,
        spec=spec,
        provider=provider,
        window=window,
        by_name={tool.name: tool for tool in tools},
        worksite=worksite,
        watch=stalls.watch(ctx, tools=spec.tools) if spec.stalls else None,
        reclaimed=reclaimed,
    )


def turn(run: Agent, number: int) -> Outcome | None:
    """One turn; None while the run goes on.

    1. The thread is made to fit the model's window (or the run ends blocked).
    2. The model step: the owner's queued messages, then one model response.
    3. An answer without tool calls goes to the stop hook; a refusal ends the run blocked.
    4. Else the tool calls run, and the stall watch looks at the turn.
    """
    compactions = run.window.compactions
    why = run.window.fit(number)
    if why is not None:
        return Outcome(RunStatus.BLOCKED, {"reason": why})
    resume.before_turn(run, number, compacted=run.window.compactions > compactions)
    run.window.conversation.turn = number
    response = run.ctx.step(
        StepKind.MODEL_CALL,
        effect=Effect.MODEL_CALL,
        name=run.spec.model,
        request={"turn": number, "provider": run.provider.name, "model": run.spec.model},
        execute=functools.partial(_model_step, run, run.window.conversation),
        then=functools.partial(_planned_reads, run.by_name),
    )
    run.window.take(response)
    # Cut short (an interrupt, or a stop the next step ends the run for): nothing of it
    # is in the thread, and the owner has the turn.
    run.handed = bool(response.get("interrupted"))
    if run.handed:
        return None
    if response["stop_reason"] == "refusal":
        return Outcome(RunStatus.BLOCKED, {"refusal": response.get("refusal"), "turn": number})
    if not response["tool_calls"]:
        return _answered(run, response["text"], number)
    _act(run, response, number)
    return None


def _answered(run: Agent, text: str, number: int) -> Outcome | None:
    """The model's answer: the run ends with it unless an action outside did not happen or its
    stop hook refuses it (then the model is told why, and goes on)."""
    # What the owner reads of the model's words carries none of our data-block markup
    # (a model quotes a tool result as it read it).
    answer = framing.unwrap(text)
    if run.undone:
        return Outcome(
            RunStatus.BLOCKED,
            {"answer": answer, "reason": harness.undone_reason(run.undone), "turns": number},
        )
    stop = _stop_hook(run.ctx, run.spec, text, attempt=run.refusals + 1)
    refusal = stop.refusal
    if refusal is None:
        return Outcome(RunStatus.DONE, {"answer": answer, "turns": number, **stop.report})
    run.refusals += 1
    if run.refusals >= MAX_STOP_REFUSALS:
        hook = STOP_HOOKS.get(run.spec.stop_hook or "")
        if isinstance(hook, ContextStopHook) and hook.exhausted != RunStatus.BLOCKED:
            return Outcome(
                hook.exhausted,
                {"refused_by_stop_hook": refusal, "turn": number, "answer": answer, **stop.report},
            )
        return Outcome(RunStatus.BLOCKED, {"refused_by_stop_hook": refusal, "turn": number})
    run.window.tell(refusal, prefix=STOP_HOOK_PREFIX)
    return None


def _act(run: Agent, response: dict[str, Any], number: int) -> None:
    """Run the tool calls of a response, their results into the thread, then the stall watch."""
    calls = response["tool_calls"]
    verdicts = response.get("permissions") or harness.judge(run.by_name, run.worksite, calls)
    results = harness.run_tools(
        run.ctx,
        calls,
        verdicts,
        run.by_name,
        run.worksite,
        response["text"],
        checkpointing=run.spec.checkpoints,
        framed=run.spec.data_framing,
    )
    harness.note_undone(run.undone, calls, results, run.by_name)
    resume.after_tools(run, calls, results)
    run.window.add(run.provider.tool_results(results))
    if run.watch is None:
        return
    stalled = stalls.after_turn(
        run.ctx, run.watch, turn=number, response=response, calls=calls, results=results
    )
    if stalled:
        run.window.tell(stalled)


def _stop_hook(ctx: RunContext, spec: Spec, answer: str, *, attempt: int) -> StopCheck:
    """Ask the run's stop hook whether it may end with `answer`: a plain hook inside one
    journaled `verdict` step, a context hook through its own steps."""
    if spec.stop_hook is None:
        return StopCheck(None)
    hook = STOP_HOOKS.get(spec.stop_hook)
    if hook is None:
        raise StepFailed(f"Unknown stop hook {spec.stop_hook!r}.")
    if isinstance(hook, ContextStopHook):
        return hook.check(ctx, spec, answer, attempt)
    plain = hook
    verdict = ctx.step(
        StepKind.VERDICT,
        effect=Effect.READ,
        name=spec.stop_hook,
        request={"answer": answer},
        execute=lambda call: Done({"refusal": plain(answer, dict(ctx.input))}),
    )
    refusal = verdict["refusal"]
    return StopCheck(str(refusal) if refusal else None)


def _planned_reads(tools: dict[str, Tool], response: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """The intents of the read tool calls the model just asked for, committed with its answer.

    `harness.run_tools` gives call i the step right after call i-1, so the planned steps are the
    leading reads (a write breaks the run: its intent must be its own).
    """
    planned: list[tuple[str, str, Any]] = []
    verdicts = response.get("permissions") or []
    for index, call in enumerate(response["tool_calls"]):
        tool = tools.get(call["name"])
        if tool is not None and (tool.effect != Effect.READ or tool.interact is not None):
            break
        verdict = verdicts[index] if index < len(verdicts) else None
        if verdict is not None and verdict["decision"] != Decision.ALLOW:
            break
        planned.append(
            (
                StepKind.TOOL_CALL,
                call["name"],
                {"call_id": call["call_id"], "arguments": call["arguments"]},
            )
        )
    return planned


def _model_step(run: Agent, conversation: Conversation, call: StepCall) -> Done:
    """Deliver the owner's queued messages, then ask the model. The delivered messages are
    part of the recorded result, so a replay appends them at the same place.

    After an answer the owner cut short, the model is not asked until a message of theirs is
    here to deliver: the run waits (its intent stays without a result, so the message's wake-up
    replays this step, which asks then)."""
    provider = run.provider
    delivered: list[str] = []
    if run.look or call.woken or run.handed:
        delivered = steering.take_pending(run_id=call.run_id, seq=call.seq)
        run.look = False
    if run.handed and not delivered:
        raise Suspend(None, "interrupted by the owner: waiting for their message")
    asked = conversation
    if delivered:
        # The loop appends them to the real conversation from the recorded result (live or
        # replayed alike); the request is built on a copy.
        items = [*conversation.items[:-1], copy.deepcopy(conversation.items[-1])]
        for text in delivered:
            append_user_text(provider, items, from_owner(text))
        asked = replace(conversation, items=items)
    # Its text and reasoning stream to open consoles as step (run, seq) while it is written.
    with deltas.streaming(call.run_id, call.seq):
        done = model_call.call(
            provider, asked, run.window.tools, run.window.options, run.spec, call
        )
    # The harness's permission verdicts on the calls the model asked for are recorded with
    # its answer: journaled, and the same on a replay even if the rules changed since.
    permissions = harness.judge(run.by_name, run.worksite, done.result["tool_calls"])
    return Done({**done.result, "owner_messages": delivered, "permissions": permissions}, done.cost)
