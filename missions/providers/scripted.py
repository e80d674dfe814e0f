"""The offline provider: plays a JSON script of model turns, deterministically.

What `make run` uses when no API key is set; everything it produces says it is scripted. A
script is `{"turns": [{"text": ..., "reasoning": ..., "tool_calls": [{"name": ..., "arguments":
{...}}], "usage": {"input_tokens": ..., ...}}, ...]}`. The turn played is the conversation's turn
number (compacted turns included), so a replayed conversation gets the same answer. A turn with
`"echo_context": true` answers with the whole context it was given (how tests see what the model
saw); compaction requests get a fixed summary and use no turn.

It reads the results of its own calls as a model would: a turn with `"on_error": {turn}` plays
that turn instead when a call of the turn before failed or was refused, its `{error}` replaced by
the first such result. A turn's text may also quote what an earlier call returned: `{output:T.N}`
is the output of the N-th call of turn T (both from 1), as the tool gave it (out of its data
block), long outputs cut in the middle. Both are filled from the conversation alone, so a replay
after a crash writes the same bytes. What it reports is then what happened, not what the script
hoped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from missions.providers.base import (
    BadRequest,
    Completed,
    Conversation,
    Event,
    Options,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    Watch,
)

NAME = "scripted"
LABEL = "[scripted offline model] "


class ScriptedProvider:
    name = NAME
    counts_tokens = False
    caches_prompts = False
    clearing_capability: str | None = None

    def __init__(self, script: dict[str, Any]) -> None:
        turns = script.get("turns")
        if not isinstance(turns, list) or not turns:
            raise BadRequest("A script needs a non-empty list of turns.")
        self.turns: list[dict[str, Any]] = turns
        self.calls = 0  # how many times the model was asked: tests count replays with it
        # Items are only appended: measure the new ones each turn, not the whole thread.
        self._measured: tuple[int, int] = (0, 0)  # (items measured, their characters)

    def stream(
        self,
        conversation: Conversation,
        tools: list[ToolSpec],
        options: Options,
        *,
        abort: Watch | None = None,  # a script answers at once: nothing to cut
    ) -> Iterator[Event]:
        self.calls += 1
        if options.purpose == "compaction":
            yield from self._summary(conversation)
            return
        index = conversation.turn - 1
        if index >= len(self.turns):
            raise BadRequest(f"The script has {len(self.turns)} turns; turn {index + 1} asked.")
        turn = self.turns[index]
        failed = _first_error(conversation.items)
        if isinstance(turn.get("on_error"), dict) and failed is not None:
            turn = turn["on_error"]
        written = _fill(str(turn.get("text", "")), conversation.items, failed or "")
        text = LABEL + written if written else ""
        if turn.get("echo_context"):
            text = LABEL + json.dumps(
                {"system": conversation.system, "items": conversation.items}, ensure_ascii=False
            )
        if turn.get("reasoning"):
            yield ReasoningDelta(str(turn["reasoning"]))
        if text:
            yield TextDelta(text)
        calls = []
        for number, call in enumerate(turn.get("tool_calls", [])):
            raw = call.get("raw_arguments")
            raw = raw if isinstance(raw, str) else json.dumps(call.get("arguments", {}))
            try:
                arguments, error = json.loads(raw), None
            except json.JSONDecodeError as problem:
                arguments, error = None, f"invalid JSON arguments: {problem}"
            tool_call = ToolCall(
                call_id=f"call_{index}_{number}",
                name=call["name"],
                arguments=arguments,
                raw_arguments=raw,
                error=error,
            )
            calls.append(tool_call)
            yield tool_call
        # Unless the script says otherwise, usage is what the request and answer would weigh
        # (4 characters a token), so context sizes grow as they would with a real model.
        usage = Usage(
            **{
                "input_tokens": (len(conversation.system) + self._chars(conversation.items)) // 4,
                "output_tokens": len(text) // 4,
                **{k: int(v) for k, v in turn.get("usage", {}).items()},
            }
        )
        item = {
            "role": "assistant",
            "text": text,
            "tool_calls": [
                {"id": c.call_id, "name": c.name, "arguments": c.raw_arguments} for c in calls
            ],
        }
        yield Completed(stop_reason="tool_use" if calls else "end_turn", usage=usage, items=[item])

    def _chars(self, items: list[dict[str, Any]]) -> int:
        count, chars = self._measured
        if count > len(items):  # compacted: the thread restarted
            count, chars = 0, 0
        chars += sum(len(json.dumps(item)) for item in items[count:])
        self._measured = (len(items), chars)
        return chars

    def _summary(self, conversation: Conversation) -> Iterator[Event]:
        text = LABEL + f"Decisions: continue. Compacted {len(conversation.items)} item(s)."
        yield TextDelta(text)
        usage = Usage(input_tokens=len(json.dumps(conversation.items)) // 4, output_tokens=20)
        yield Completed(
            stop_reason="end_turn", usage=usage, items=[{"role": "assistant", "text": text}]
        )

    def count_tokens(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options
    ) -> int:
        # No counting endpoint: the weight its usage would give (4 characters a token).
        return (len(conversation.system) + sum(len(json.dumps(i)) for i in conversation.items)) // 4

    def user_message(self, text: str) -> dict[str, Any]:
        return {"role": "user", "text": text}

    def tool_results(self, results: list[ToolResult]) -> list[dict[str, Any]]:
        return [
            {"role": "tool", "call_id": r.call_id, "output": r.output, "is_error": r.is_error}
            for r in results
        ]


ERROR_CHARS = 500  # of a failed result, quoted in an answer
OUTPUT_CHARS = 6000  # of an output quoted with {output:T.N}: its start and its end

# `{error}`, or `{output:T.N}`: filled in one pass, so what a tool returned is never read as one.
_PLACEHOLDER = re.compile(r"\{error\}|\{output:(\d+)\.(\d+)\}")
# A tool result rendered as data (`missions.engine.framing.render`): its content is quoted.
_DATA_BLOCK = re.compile(r"<data-([0-9a-f]{16}) [^>\n]*>\n(.*)\n</data-\1>", re.DOTALL)


def _fill(text: str, items: list[dict[str, Any]], error: str) -> str:
    """`text` with its placeholders replaced from the conversation: a pure function of it."""

    def one(found: re.Match[str]) -> str:
        if found.group(1) is None:
            return error
        turn, number = int(found.group(1)), int(found.group(2))
        return _output(items, f"call_{turn - 1}_{number - 1}") or (
            f"[no output of call {number} of turn {turn} in the conversation]"
        )

    return _PLACEHOLDER.sub(one, text)


def _output(items: list[dict[str, Any]], call_id: str) -> str | None:
    for item in items:
        if item.get("role") == "tool" and item.get("call_id") == call_id:
            output = str(item.get("output", ""))
            framed = _DATA_BLOCK.fullmatch(output)
            output = framed.group(2) if framed else output
            if len(output) <= OUTPUT_CHARS:
                return output
            half = OUTPUT_CHARS // 2
            left_out = len(output) - 2 * half
            return f"{output[:half]}\n[... {left_out} characters left out ...]\n{output[-half:]}"
    return None


def _first_error(items: list[dict[str, Any]]) -> str | None:
    """The first failed result among the tool results that end the conversation (the answers to
    the calls of the last turn), on one line; None when they all succeeded, or there are none."""
    results: list[dict[str, Any]] = []
    for item in reversed(items):
        if item.get("role") == "tool":
            results.insert(0, item)
        elif item.get("role") == "assistant":
            break  # the turn that made the calls
        # else an owner's message that came after the results: read past it

    for result in results:
        if result.get("is_error"):
            text = " ".join(str(result.get("output", "")).split())
            return text[:ERROR_CHARS]
    return None
