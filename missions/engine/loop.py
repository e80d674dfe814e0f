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
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kernel.context import Done, RunContext, StepCall
from kernel.exceptions import StepFailed, Suspend
from kernel.models import Effect, RunStatus, StepKind, Trust
from kernel.programs import Outcome
from memory import tasks as memory_tasks
from missions import steering
from missions.engine import (
    deltas,
    fingerprint,
    framing,
    harness,
    model_call,
    relief,
    stalls,
)
from missions.engine.prompt import assemble
from missions.engine.relief import Verbatim
from missions.engine.spec import (
    MAX_STOP_REFUSALS,
    STOP_HOOK_PREFIX,
    STOP_HOOKS,
    ContextStopHook,
    Spec,
    StopCheck,
)
from missions.models import Mission, ModelInfo
from missions.providers import registry
from missions.providers.base import (
    Conversation,
    Options,
    Provider,
    ProviderError,
)
from tools import registry as tool_registry
from tools.base import Risk, Tool
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
    memory_tasks.consolidate_soon(_memory_scope(ctx), why=f"run {ctx.run_id} ended")
    return outcome


def _memory_scope(ctx: RunContext) -> str | None:
    project = Mission.objects.filter(pk=ctx.run.account_id).values_list("project_id", flat=True)
    found = project.first()
    return f"project/{found}" if found else None


def _agent(ctx: RunContext) -> Outcome:
    spec = Spec.from_input(ctx.input)
    names = list(spec.tools)
    if any((tool_registry.get(name) or NO_TOOL).deferred for name in names):
        names.append("load_tool_schema")
    tools = tool_registry.frozen(names)
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
    _give_memory(provider, conversation.items, spec)
    by_name = {tool.name: tool for tool in tools}
    bench = harness.workbench(ctx, spec.repository, spec.base, spec.sandbox_level)
    # Recorded once: a window edited in the catalog mid-run must not move the compaction points
    # of a replay (the journal would no longer match the program).
    window, server_clearing = _model_facts(
        ctx.step(
            StepKind.CHECKPOINT,
            effect=Effect.READ,
            name="context-window",
            request={},
            execute=lambda call: Done(_context_facts(provider, spec)),
        )
    )
    if server_clearing:
        # The provider clears old tool results on its side: the thread we keep stays whole.
        options = replace(options, server_clearing=relief.server_clearing(window))
    count = functools.partial(_count, ctx, provider, prefix.tools, options)
    verbatim = Verbatim(goal=spec.goal, constraints=spec.constraints, owner_messages=[])
    size = relief.estimate_tokens(prefix.system) + relief.estimate_tokens(conversation.items)
    compactions = 0
    refusals = 0
    # Look for owner messages at the first model call of this execution (they may have come
    # while the run waited), then only when the kernel says something arrived.
    look = [True]
    # The last answer was cut short by the owner's interrupt: the turn is theirs, and the next
    # model step waits for their message (`_model_step`).
    handed = [False]
    watch = stalls.watch(ctx, tools=spec.tools) if spec.stalls else None
    # Why each action outside (`Risk.EXTERNAL`: a push...) did not happen, by tool, while its
    # last call did not: a run that set out to act and was refused does not end `done`.
    undone: dict[str, str] = {}
    for turn in range(1, spec.max_turns + 1):
        # Clearing is ours unless the provider does it, and only worth it a batch at a time
        # (looked at only past its threshold: it reads the whole thread).
        clearing = (
            size > relief.CLEAR_AT * window
            and not server_clearing
            and relief.clearable(conversation.items)
        )
        # A decision taken on an estimate is first checked with the provider's own count.
        if size > (relief.CLEAR_AT if clearing else relief.COMPACT_AT) * window:
            size = count(conversation, turn=turn, estimate=size)
        if clearing and relief.CLEAR_AT * window < size <= relief.COMPACT_AT * window:
            cleared = relief.clear_old_tool_results(conversation.items)
            if cleared:
                size = relief.estimate_tokens(prefix.system) + relief.estimate_tokens(
                    conversation.items
                )
        if size > relief.COMPACT_AT * window:
            compactions += 1
            memory_tasks.consolidate_soon(
                _memory_scope(ctx), why=f"run {ctx.run_id} compacted its context"
            )
            conversation = _compact(
                ctx,
                provider,
                conversation,
                options,
                spec,
                verbatim,
                turn=turn,
                compactions=compactions,
            )
            size = relief.estimate_tokens(prefix.system) + relief.estimate_tokens(
                conversation.items
            )
            if size > relief.COMPACT_AT * window:
                size = count(conversation, turn=turn, estimate=size)
            if size > relief.COMPACT_AT * window:
                # Even the summary does not fit: going on would fail at the provider, or loop.
                return Outcome(
                    RunStatus.BLOCKED,
                    {
                        "reason": f"the context does not fit the {window}-token window even after"
                        f" compaction ({size} tokens estimated)"
                    },
                )
        conversation.turn = turn
        response = ctx.step(
            StepKind.MODEL_CALL,
            effect=Effect.MODEL_CALL,
            name=spec.model,
            request={"turn": turn, "provider": provider.name, "model": spec.model},
            execute=functools.partial(
                _model_step,
                provider,
                conversation,
                prefix.tools,
                options,
                spec,
                look,
                handed,
                functools.partial(harness.judge, by_name, bench),
            ),
            then=functools.partial(_planned_reads, by_name),
        )
        for text in response.get("owner_messages", []):
            _append_user_text(provider, conversation.items, _from_owner(text))
            verbatim.owner_messages.append(text)
        conversation.items.extend(response["items"])
        usage = response["usage"]
        # The provider counted this request exactly; what we append next is estimated.
        size = (
            usage["input_tokens"]
            + usage["cache_read_tokens"]
            + usage["cache_write_tokens"]
            + usage["output_tokens"]
        ) or size + relief.estimate_tokens(response["items"])
        # Cut short (an interrupt, or a stop the next step ends the run for): nothing of it
        # is in the thread, and the owner has the turn.
        handed[0] = bool(response.get("interrupted"))
        if handed[0]:
            continue
        if response["stop_reason"] == "refusal":
            return Outcome(RunStatus.BLOCKED, {"refusal": response.get("refusal"), "turn": turn})
        calls = response["tool_calls"]
        if not calls:
            # What the owner reads of the model's words carries none of our data-block markup
            # (a model quotes a tool result as it read it).
            answer = framing.unwrap(response["text"])
            if undone:
                return Outcome(
                    RunStatus.BLOCKED,
                    {"answer": answer, "reason": harness.undone_reason(undone), "turns": turn},
                )
            stop = _stop_hook(ctx, spec, response["text"], attempt=refusals + 1)
            refusal = stop.refusal
            if refusal is None:
                return Outcome(RunStatus.DONE, {"answer": answer, "turns": turn, **stop.report})
            refusals += 1
            if refusals >= MAX_STOP_REFUSALS:
                hook = STOP_HOOKS.get(spec.stop_hook or "")
                if isinstance(hook, ContextStopHook) and hook.exhausted != RunStatus.BLOCKED:
                    return Outcome(
                        hook.exhausted,
                        {
                            "refused_by_stop_hook": refusal,
                            "turn": turn,
                            "answer": answer,
                            **stop.report,
                        },
                    )
                return Outcome(RunStatus.BLOCKED, {"refused_by_stop_hook": refusal, "turn": turn})
            # The model is told why it may not stop yet, and goes on.
            _append_user_text(provider, conversation.items, STOP_HOOK_PREFIX + refusal)
            size += relief.estimate_tokens(refusal)
            continue
        verdicts = response.get("permissions") or harness.judge(by_name, bench, calls)
        results = harness.run_tools(
            ctx,
            calls,
            verdicts,
            by_name,
            bench,
            response["text"],
            checkpointing=spec.checkpoints,
            framed=spec.data_framing,
        )
        harness.note_undone(undone, calls, results, by_name)
        answers = provider.tool_results(results)
        conversation.items.extend(answers)
        size += relief.estimate_tokens(answers)
        stalled = (
            stalls.after_turn(
                ctx, watch, turn=turn, response=response, calls=calls, results=results
            )
            if watch is not None
            else None
        )
        if stalled:
            _append_user_text(provider, conversation.items, stalled)
            size += relief.estimate_tokens(stalled)
    return Outcome(RunStatus.PARTIAL, {"reason": f"turn cap {spec.max_turns} reached"})


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


def _context_facts(provider: Provider, spec: Spec) -> dict[str, Any]:
    """The model's window (the run's own figure, else the catalog's, else a default) and
    whether its provider clears old tool results server-side (where the catalog, read from the
    model listing, says the model has the provider's clearing capability)."""
    known = ModelInfo.objects.filter(provider=provider.name, model=spec.model).first()
    capabilities = known.capabilities if known is not None else {}
    return {
        "window": spec.context_window
        or (known.context_window if known is not None else None)
        or relief.DEFAULT_WINDOW,
        "server_clearing": relief.supports_server_clearing(
            capabilities, provider.clearing_capability
        ),
    }


def _model_facts(recorded: Any) -> tuple[int, bool]:
    """(window, server-side clearing) from the recorded checkpoint; runs recorded before the
    checkpoint said more than the window hold a bare number, and clear on our side."""
    if isinstance(recorded, int):
        return recorded, False
    return int(recorded["window"]), bool(recorded["server_clearing"])


def _count(
    ctx: RunContext,
    provider: Provider,
    tools: list[Any],
    options: Options,
    conversation: Conversation,
    *,
    turn: int,
    estimate: int,
) -> int:
    """The size of the next request as the provider counts it (a journaled read, so a replay
    decides the same), or `estimate` where the provider has no counting endpoint or the count
    failed: a count is worth a decision, not a failed run."""
    if not provider.counts_tokens:
        return estimate

    def counted(call: StepCall) -> Done:
        try:
            return Done({"tokens": provider.count_tokens(conversation, tools, options)})
        except ProviderError as error:
            return Done({"tokens": None, "error": f"{error.code}: {error.message}"})

    result = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name="count-tokens",
        request={"turn": turn, "estimate": estimate},
        execute=counted,
    )
    tokens = result.get("tokens")
    return int(tokens) if isinstance(tokens, int) else estimate


def _compact(
    ctx: RunContext,
    provider: Provider,
    conversation: Conversation,
    options: Options,
    spec: Spec,
    verbatim: Verbatim,
    *,
    turn: int,
    compactions: int,
) -> Conversation:
    """Fold the conversation into our structured summary (a journaled `compaction` step).

    The goal, constraints and owner instructions are copied by the harness, word for word; the
    model only writes the progress narrative. The new conversation starts from that summary.
    """

    def summarise(call: StepCall) -> Done:
        # Old tool results are cleared from what the summariser reads (already done on our
        # side, unless the provider clears them on its own and our thread is whole).
        items = copy.deepcopy(conversation.items)
        relief.clear_old_tool_results(items)
        transcript = Conversation(
            provider=provider.name,
            system=relief.COMPACTION_SYSTEM
            + (f"\n{framing.DATA_RULE}" if spec.data_framing else ""),
            items=[provider.user_message(json.dumps(items, ensure_ascii=False))],
            turn=turn,
        )
        # Not interruptible: the thread is being folded, the owner's message waits for the
        # next turn; a stop still ends it at once.
        done = model_call.call(
            provider,
            transcript,
            [],
            replace(options, purpose="compaction"),
            spec,
            call,
            interruptible=False,
        )
        # Rehydration: the working files are re-read now and recorded with the summary, so a
        # replay rebuilds the same context even if the files changed since.
        found = relief.rehydrate(ctx.run.workspace, run_id=ctx.run_id)
        return Done(
            {"narrative": done.result["text"], "usage": done.result["usage"], **found},
            done.cost,
        )

    result = ctx.step(
        StepKind.COMPACTION,
        effect=Effect.MODEL_CALL,
        name=spec.model,
        request={"turn": turn, "compaction": compactions},
        execute=summarise,
    )
    # A user message, never the system prompt: the re-read files in it are data.
    summary = relief.summary_message(
        verbatim,
        result["narrative"],
        compactions=compactions,
        files=result.get("files", {}),
        from_repository=result.get("from_repository"),  # absent from older journals: the agent's
        # What the compaction step holds is as trusted as the kernel records it (the model's).
        trust=framing.trust_of(ctx.records[ctx.seq]) if spec.data_framing else None,
    )
    items = [provider.user_message(summary)]
    _give_memory(provider, items, spec)  # as the run began: the summary replaces the thread
    return Conversation(provider=provider.name, system=conversation.system, items=items, turn=turn)


def _give_memory(provider: Provider, items: list[dict[str, Any]], spec: Spec) -> None:
    """The run's memory index, as data after the opening message, for runs that get it so."""
    given = framing.memory(spec.memory_index) if spec.memory_as_data else ""
    if given:
        _append_user_text(provider, items, given)


def _model_step(
    provider: Provider,
    conversation: Conversation,
    tools: list[Any],
    options: Options,
    spec: Spec,
    look: list[bool],
    handed: list[bool],
    judge: Callable[[list[dict[str, Any]]], list[dict[str, Any] | None]],
    call: StepCall,
) -> Done:
    """Deliver the owner's queued messages, then ask the model. The delivered messages are
    part of the recorded result, so a replay appends them at the same place.

    After an answer the owner cut short, the model is not asked until a message of theirs is
    here to deliver: the run waits (its intent stays without a result, so the message's wake-up
    replays this step, which asks then)."""
    delivered: list[str] = []
    if look[0] or call.woken or handed[0]:
        delivered = steering.take_pending(run_id=call.run_id, seq=call.seq)
        look[0] = False
    if handed[0] and not delivered:
        raise Suspend(None, "interrupted by the owner: waiting for their message")
    asked = conversation
    if delivered:
        # The loop appends them to the real conversation from the recorded result (live or
        # replayed alike); the request is built on a copy.
        items = [*conversation.items[:-1], copy.deepcopy(conversation.items[-1])]
        for text in delivered:
            _append_user_text(provider, items, _from_owner(text))
        asked = replace(conversation, items=items)
    # Its text and reasoning stream to open consoles as step (run, seq) while it is written.
    with deltas.streaming(call.run_id, call.seq):
        done = model_call.call(provider, asked, tools, options, spec, call)
    # The harness's permission verdicts on the calls the model asked for are recorded with
    # its answer: journaled, and the same on a replay even if the rules changed since.
    permissions = judge(done.result["tool_calls"])
    return Done({**done.result, "owner_messages": delivered, "permissions": permissions}, done.cost)


OWNER_PREFIX = "Message from the owner: "


def _from_owner(text: str) -> str:
    """A steering message, as the owner's: `steering` records each as the owner's."""
    return framing.render(OWNER_PREFIX + text, trust=Trust.OWNER, source="owner")


def _append_user_text(provider: Provider, items: list[dict[str, Any]], text: str) -> None:
    """Add a user message; merged into a trailing user message (tool results) where the
    provider's format has content lists, since some providers want roles to alternate."""
    item = provider.user_message(text)
    last = items[-1] if items else None
    if (
        last is not None
        and last.get("role") == "user"
        and isinstance(last.get("content"), list)
        and isinstance(item.get("content"), list)
    ):
        last["content"] = [*last["content"], *item["content"]]
    else:
        items.append(item)
