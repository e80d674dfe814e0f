"""The offline scripted model reads the results of the calls it made: a turn may say what to
answer instead when one of them failed or was refused, and quote what a call returned, so what
it reports is what happened."""

from __future__ import annotations

from typing import Any

from missions import offline
from missions.engine import framing
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


# --- quoting what an earlier call returned ------------------------------------------------------

QUOTING: dict[str, Any] = {
    "turns": [
        {
            "text": "Looking.",
            "tool_calls": [
                {"name": "list_files", "arguments": {}},
                {"name": "shell", "arguments": {"command": "make test"}},
            ],
        },
        {
            "text": "Listing:\n{output:1.1}\nTests:\n{output:1.2}\nMissing: {output:3.1}",
            "on_error": {"text": "Not run: {error}"},
        },
    ]
}


def quoted(script: dict[str, Any], results: list[ToolResult]) -> str:
    provider = ScriptedProvider(script)
    conversation = Conversation(provider="scripted", system="", items=[{"role": "user"}])
    _, first = answer(provider, conversation)
    conversation.items.extend(first.items)
    conversation.items.extend(provider.tool_results(results))
    conversation.turn = 2
    text, _ = answer(provider, conversation)
    return text


def framed(output: str, name: str) -> str:
    return framing.render(output, trust="tool", source=f"tool {name}")


def test_it_quotes_earlier_outputs_verbatim_out_of_their_data_blocks() -> None:
    tests = "FAIL: test_x\n  {output:1.1} {error} stays as written\n[exit code 2]"
    results = [
        ToolResult("call_0_0", framed("a.py\nb.py", "list_files")),
        ToolResult("call_0_1", framed(tests, "shell")),
    ]

    text = quoted(QUOTING, results)

    assert text == (
        f"{LABEL}Listing:\na.py\nb.py\nTests:\n{tests}\n"
        "Missing: [no output of call 1 of turn 3 in the conversation]"
    )


def test_the_same_conversation_gives_the_same_bytes_to_another_provider() -> None:
    results = [ToolResult("call_0_0", "x" * 10_000), ToolResult("call_0_1", "ok")]

    first, again = quoted(QUOTING, results), quoted(QUOTING, results)

    assert first == again
    assert "[... 4000 characters left out ...]" in first
    assert len(first) < 7_000


def test_the_test_report_says_the_tests_did_not_run_when_the_command_failed() -> None:
    script = offline.MISSIONS["run-tests"].script
    provider = ScriptedProvider(script)
    conversation = Conversation(provider="scripted", system="", items=[{"role": "user"}])
    for turn, result in (
        (1, ToolResult("call_0_0", "calc.py")),
        (2, ToolResult("call_1_0", "No sandbox on this node: bwrap missing", is_error=True)),
    ):
        conversation.turn = turn
        _, completed = answer(provider, conversation)
        conversation.items.extend(completed.items)
        conversation.items.extend(provider.tool_results([result]))
    conversation.turn = 3

    text, _ = answer(provider, conversation)

    assert text == (
        f"{LABEL}Test report: the tests were not run. The sandbox did not run the test command:"
        " No sandbox on this node: bwrap missing"
    )
