"""One model response as the agent loop's step records it: streamed (its text and reasoning
relayed to open consoles), retried on transient provider errors, priced, and cut short the
moment the step is asked to stop or the owner interrupts (`missions.providers.cutting`)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from kernel import journal, steps
from kernel.context import Done, StepCall
from kernel.exceptions import StepFailed
from missions import pricing
from missions.engine import deltas, outage, retries
from missions.engine.spec import Spec
from missions.providers.base import (
    Aborted,
    Completed,
    Conversation,
    Options,
    Provider,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
    Watch,
)

# Retried in place this many times (a second later), holding the worker; past that a
# transient failure is waited out durably (`outage`).
RETRIES = 1


def call(
    provider: Provider,
    conversation: Conversation,
    tools: list[Any],
    options: Options,
    spec: Spec,
    call: StepCall,
    *,
    interruptible: bool = True,
) -> Done:
    """One model response, retried on transient errors; the recorded result is JSON. A wait
    before a retry ends at once when the step is asked to stop (`retries`), and so does the
    answer itself, its connection closed (`cutting`): an `interruptible` step records it as
    cut short (`cut_short`); another one ends the run if it is stopping and else, an interrupt
    not being for it, asks again."""
    outage.still_held(call)
    lost = Usage()  # what failed attempts cost (`ProviderError.spent`), counted with the answer
    fresh = True  # whether a stop signal already set is news to this step (not a spent interrupt)
    attempt = 0
    while True:
        try:
            completed, text, reasoning, calls = _collect(
                provider, conversation, tools, options, _abort(call, fresh=fresh)
            )
            break
        except Aborted as cut:
            if interruptible:
                return cut_short(provider, spec, cut)
            retries.must_stop(call, "stopped while the model answered")
            fresh = False
        except ProviderError as error:
            lost = outage.plus(lost, error.spent)
            if error.permanent or attempt == RETRIES or retries.too_long(error.retry_after):
                outage.fail_or_wait(provider.name, error, call, lost=lost)
            wait = retries.backoff_seconds(attempt, error.retry_after)
            if retries.wait_before_retry(call, wait):
                fresh = False  # the owner's interrupt ended the wait: the retry goes at once
            attempt += 1
    lost = outage.plus(lost, outage.recovered(call))
    priced = pricing.price_of(
        provider=provider.name, model=spec.model, usage=outage.plus(completed.usage, lost)
    )
    cleared = (
        {
            "cleared": {
                "tool_results": completed.cleared_tool_results,
                "tokens": completed.cleared_tokens,
            }
        }
        if completed.cleared_tool_results
        else {}
    )
    return Done(
        {
            **cleared,
            # Failed attempts' usage, in the step's cost (`usage` stays the answer's own).
            **({"lost_usage": _as_json(lost)} if lost != Usage() else {}),
            # Sent back on every later turn: in the order a replay reads them, so a resumed
            # run sends the same bytes as the run before its crash.
            "items": journal.as_stored(completed.items),
            "text": text,
            "reasoning": reasoning,
            "tool_calls": [_as_json(call) for call in calls],
            "stop_reason": completed.stop_reason,
            "refusal": completed.refusal,
            "usage": _as_json(completed.usage),
            "price_version": priced.price_version,
            "usd_micros": priced.cost.usd_micros,  # what this turn cost, as metered
        },
        priced.cost,
    )


def _abort(call: StepCall, *, fresh: bool) -> Watch:
    """The step's stop signal as the provider's way to cut its answer short."""
    return lambda cut: steps.cutting(call.stopping, cut, if_set=fresh)


def cut_short(provider: Provider, spec: Spec, cut: Aborted) -> Done:
    """An answer cut short by a stop or the owner's interrupt, as its step records it: none of
    it (a replay never sends half an answer back to the model, and no tool call of it runs), and
    what the provider had reported of its usage, counted like any answer's."""
    priced = pricing.price_of(provider=provider.name, model=spec.model, usage=cut.usage)
    return Done(
        {
            "interrupted": True,
            "items": [],
            "text": "",
            "reasoning": "",
            "tool_calls": [],
            "stop_reason": "interrupted",
            "refusal": None,
            "usage": _as_json(cut.usage),
            "price_version": priced.price_version,
            "usd_micros": priced.cost.usd_micros,
        },
        priced.cost,
    )


def _as_json(event: ToolCall | Usage) -> dict[str, Any]:
    """`dataclasses.asdict` for a provider's flat events, whose values are JSON: the same fresh
    containers, without its generic deep copy (twice per turn, 4 % of a turn's own time)."""
    return {f.name: _fresh(getattr(event, f.name)) for f in _FIELDS[type(event)]}


_FIELDS = {kind: fields(kind) for kind in (ToolCall, Usage)}


def _fresh(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _fresh(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_fresh(item) for item in value]
    return value


def _collect(
    provider: Provider,
    conversation: Conversation,
    tools: list[Any],
    options: Options,
    abort: Watch | None = None,
) -> tuple[Completed, str, str, list[ToolCall]]:
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    relay = deltas.relay()
    try:
        for event in provider.stream(conversation, tools, options, abort=abort):
            if isinstance(event, TextDelta):
                text.append(event.text)
                if relay is not None:
                    relay.add("text", event.text)
            elif isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
                if relay is not None:
                    relay.add("reasoning", event.text)
            elif isinstance(event, ToolCall):
                calls.append(event)
            elif isinstance(event, Completed):
                return event, "".join(text), "".join(reasoning), calls
    finally:
        if relay is not None:
            relay.flush()
    raise StepFailed(f"{provider.name}: the stream ended without a completed response")
