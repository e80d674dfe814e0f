"""Stall detection: a run going round in circles is told so once, then its owner is asked.

A turn stalls the run when
- the same tool call (name and canonical arguments) was made `REPEATS` times in a row,
  counted across turns;
- a supervisor (a root run keeping the mission's ledger) went `QUIET_TURNS` turns without a
  ledger change;
- the run's spend reached `NEAR` of one of its own caps (once per cap).

The first stall gets a re-plan: a system message telling the model it is stalled, why, and to
re-plan. The next one is escalated: a question to the owner on Home (`approvals`' durable
wait), whose answer goes back to the model; then the count starts over.

Deterministic: everything is computed from recorded step results (the model's responses, the
tools' results, the caps fixed at the run's creation), so a replay after a crash finds the same
stalls at the same turns; each decision is also a journaled `stall` step whose recorded text is
what the model reads, word for word.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from approvals.service import ask_question
from kernel.context import Done, RunContext
from kernel.models import Effect, StepKind
from missions.ledger import WRITE_TOOL_NAMES
from missions.providers.base import ToolResult

REPEATS = 3
# Turns a supervisor may work without changing its ledger. Plenty for a plan of a few items:
# a supervisor delegates, gathers and records; eight turns without a record is drift.
QUIET_TURNS = 8
NEAR = 0.9
STEP = "stall"
REPLAN = (
    "[system] You are stalled: {reason}. Stop and re-plan: say what is established, what is"
    " left and why the last approach did not work, then take a different next step."
)
QUESTION = (
    "The agent of mission {mission} (run {run}) is stalled again after a re-plan: {reason}."
    " How should it go on?"
)
ANSWERED = "[system] You were stalled again ({reason}); the owner was asked how to go on."
OWNER = " The owner answered: {answer}"


@dataclass
class Watch:
    """What the detector has seen of this run so far (rebuilt by a replay, turn by turn)."""

    supervisor: bool
    caps: dict[str, int]
    last_call: str | None = None
    repeats: int = 0
    quiet: int = 0
    stalls: int = 0  # since the last escalation
    spent: dict[str, int] = field(
        default_factory=lambda: {"tokens": 0, "usd_micros": 0, "turns": 0, "tool_calls": 0}
    )
    warned: set[str] = field(default_factory=set)


CAPS = {
    "max_tokens": "tokens",
    "max_usd_micros": "usd_micros",
    "max_turns": "turns",
    "max_tool_calls": "tool_calls",
}
CAP_WORDS = {
    "max_tokens": "tokens",
    "max_usd_micros": "spend",
    "max_turns": "model turns",
    "max_tool_calls": "tool calls",
}


def watch(ctx: RunContext, *, tools: list[str]) -> Watch:
    run = ctx.run
    caps = {cap: int(getattr(run, cap)) for cap in CAPS if getattr(run, cap) is not None}
    return Watch(
        supervisor=run.parent_id is None and "ledger_plan" in tools,
        caps=caps,
    )


def signature(call: dict[str, Any]) -> str:
    """A call as compared: its name and its arguments, canonically."""
    return json.dumps(
        [call.get("name"), call.get("arguments")],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def after_turn(
    ctx: RunContext,
    seen: Watch,
    *,
    turn: int,
    response: dict[str, Any],
    calls: list[dict[str, Any]],
    results: list[ToolResult],
) -> str | None:
    """The text to give the model after this turn's tool results, or None: not stalled."""
    reason = _observe(seen, turn, response, calls, results)
    if reason is None:
        return None
    seen.stalls += 1
    seen.last_call, seen.repeats, seen.quiet = None, 0, 0
    if seen.stalls == 1:
        decided = ctx.step(
            StepKind.CHECKPOINT,
            effect=Effect.READ,
            name=STEP,
            request={"turn": turn, "action": "replan", "reason": reason},
            execute=lambda call: Done({"message": REPLAN.format(reason=reason)}),
        )
        return str(decided["message"])
    seen.stalls = 0
    question = QUESTION.format(mission=ctx.run.account_id, run=ctx.run_id, reason=reason)
    decided = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name=STEP,
        request={"turn": turn, "action": "escalate", "reason": reason},
        execute=lambda call: Done(
            {"question": question, "message": ANSWERED.format(reason=reason)}
        ),
    )
    answer = ask_question(ctx, str(decided["question"]))
    return str(decided["message"]) + OWNER.format(answer=answer)


def _observe(
    seen: Watch,
    turn: int,
    response: dict[str, Any],
    calls: list[dict[str, Any]],
    results: list[ToolResult],
) -> str | None:
    """Count this turn in; the first stall reason it reveals, if any."""
    reason: str | None = None
    for call in calls:
        mark = signature(call)
        seen.repeats = seen.repeats + 1 if mark == seen.last_call else 1
        seen.last_call = mark
        if seen.repeats >= REPEATS and reason is None:
            reason = (
                f"you called {call.get('name')} with the same arguments {REPEATS} times in a row"
            )
    changed = any(
        call.get("name") in WRITE_TOOL_NAMES and not result.is_error
        for call, result in zip(calls, results, strict=True)
    )
    seen.quiet = 0 if changed else seen.quiet + 1
    if seen.supervisor and seen.quiet >= QUIET_TURNS and reason is None:
        reason = f"the mission's ledger has not changed for {QUIET_TURNS} turns"
    _spend(seen, response, len(calls), turn)
    for cap, limit in seen.caps.items():
        used = seen.spent[CAPS[cap]]
        if cap not in seen.warned and limit > 0 and used >= NEAR * limit:
            seen.warned.add(cap)
            if reason is None:
                reason = f"{used * 100 // limit}% of this run's {CAP_WORDS[cap]} budget is spent"
    return reason


def _spend(seen: Watch, response: dict[str, Any], calls: int, turn: int) -> None:
    """This turn's spend, from its recorded response: its tokens and its metered cost."""
    usage = response.get("usage") or {}
    tokens = {
        name: int(usage.get(name) or 0)
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    }
    seen.spent["tokens"] += sum(tokens.values())
    # Turns that called no tool (a stop refused) are not seen here: counted by their number.
    seen.spent["turns"] = max(seen.spent["turns"] + 1, turn)
    seen.spent["tool_calls"] += calls
    seen.spent["usd_micros"] += int(response.get("usd_micros") or 0)
