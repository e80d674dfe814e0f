"""The offline scripted model reads the results of the calls it made: a turn may say what to
answer instead when one of them failed or was refused, so what it reports is what happened."""

from __future__ import annotations

from typing import Any

from missions.providers.base import Completed, Conversation, Options, TextDelta, ToolResult
from missions.providers.scripted import LABEL, ScriptedProvider

SCRIPT: dict[str, Any] = {
    "turns": [
        {
            "text": "Pushing.",
            "tool_calls": [{"name": "git_push", "arguments": {"branch": "main"}}],
        },
        {
            "text": "Pushed to origin main.",
            "on_error": {"text": "Not pushed to origin main: {error}"},
        },
    ]
}


def answer(provider: ScriptedProvider, conversation: Conversation) -> tuple[str, Completed]:
    events = list(provider.stream(conversation, [], Options(model="scripted")))
    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    completed = events[-1]
    assert isinstance(completed, Completed)
    return text, completed


def after_push(result: ToolResult) -> tuple[ScriptedProvider, Conversation]:
    provider = ScriptedProvider(SCRIPT)
    conversation = Conversation(provider="scripted", system="", items=[{"role": "user"}])
    _, first = answer(provider, conversation)
    conversation.items.extend(first.items)
    conversation.items.extend(provider.tool_results([result]))
    conversation.turn = 2
    return provider, conversation


def test_it_plays_the_turn_as_written_when_its_calls_succeeded() -> None:
    provider, conversation = after_push(ToolResult("call_0_0", "Pushed abc to origin main."))

    text, completed = answer(provider, conversation)

    assert text == LABEL + "Pushed to origin main."
    assert completed.stop_reason == "end_turn"


def test_it_says_what_happened_when_a_call_was_refused() -> None:
    refusal = "Refused: the owner refused: not today"
    provider, conversation = after_push(ToolResult("call_0_0", refusal, is_error=True))

    text, _ = answer(provider, conversation)

    assert text == LABEL + "Not pushed to origin main: " + refusal
    assert "Pushed to origin main." not in text


def test_it_answers_the_same_when_the_conversation_is_replayed() -> None:
    refusal = "Push refused by origin: rejected"
    first = answer(*after_push(ToolResult("call_0_0", refusal, is_error=True)))[0]
    again = answer(*after_push(ToolResult("call_0_0", refusal, is_error=True)))[0]

    assert first == again
