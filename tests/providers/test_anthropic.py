"""The Anthropic adapter driven through the real SDK against a local server speaking the Messages
streaming wire format (SSE events shaped as in the public streaming reference)."""

from __future__ import annotations

import json
import socket
from dataclasses import replace

import pytest

from missions.providers.anthropic import AnthropicProvider
from missions.providers.base import (
    AuthenticationFailed,
    BadRequest,
    Completed,
    ContextTooLong,
    Conversation,
    Event,
    Options,
    Overloaded,
    ProviderError,
    RateLimited,
    ReasoningDelta,
    ServerClearing,
    ServerError,
    StreamInterrupted,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolSpec,
    UnknownModel,
    Usage,
)
from tests.providers.anthropic_wire import (
    SIGNATURE,
    block,
    error_body,
    message_start,
    reply,
    text,
    thinking,
    tool_use,
)
from tests.providers.wire import Failure, Json, Received, Stream, WireServer

OPTIONS = Options(model="claude-test", max_output_tokens=4096)
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
CLOCK = ToolSpec(name="get_time", description="The time now.", input_schema={"type": "object"})


# --- Harness --------------------------------------------------------------------------------------


@pytest.fixture
def provider(server: WireServer) -> AnthropicProvider:
    return AnthropicProvider(api_key="test-key", base_url=server.url)


def conversation(text: str = "What is the weather in Paris?") -> Conversation:
    return Conversation(
        provider="anthropic",
        system="You are a careful agent.",
        items=[{"role": "user", "content": [{"type": "text", "text": text}]}],
    )


def run(
    provider: AnthropicProvider,
    thread: Conversation,
    tools: list[ToolSpec] | None = None,
    options: Options = OPTIONS,
) -> list[Event]:
    return list(provider.stream(thread, tools or [], options))


def header(request: Received, name: str) -> str | None:
    return {key.lower(): value for key, value in request.headers.items()}.get(name)


def completed(events: list[Event]) -> Completed:
    final = events[-1]
    assert isinstance(final, Completed)
    return final


def fail(
    provider: AnthropicProvider, answer: Stream | Failure, server: WireServer
) -> ProviderError:
    server.queue(answer)
    with pytest.raises(ProviderError) as caught:
        run(provider, conversation())
    return caught.value


# --- Streaming ------------------------------------------------------------------------------------


def test_it_streams_text_deltas_then_one_completed(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "Hello", " world"))))

    events = run(provider, conversation())

    assert events[:2] == [TextDelta("Hello"), TextDelta(" world")]
    assert events[2:] == [
        Completed(
            stop_reason="end_turn",
            usage=Usage(input_tokens=12, output_tokens=20),
            items=[{"role": "assistant", "content": [{"type": "text", "text": "Hello world"}]}],
        )
    ]
    sent = server.received[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["Authorization"] == "Bearer test-key"
    assert "anthropic-version" in sent.headers
    assert sent.body["stream"] is True
    assert sent.body["model"] == "claude-test"
    assert sent.body["max_tokens"] == 4096
    sent_text = {"type": "text", "text": "What is the weather in Paris?"}
    breakpoint = {"cache_control": {"type": "ephemeral"}}
    assert sent.body["messages"] == [{"role": "user", "content": [{**sent_text, **breakpoint}]}]


def test_it_assembles_a_tool_call_from_streamed_json_chunks(
    provider: AnthropicProvider, server: WireServer
) -> None:
    chunks = ('{"ci', 'ty": "Pa', 'ris"}')
    server.queue(
        Stream(
            reply(
                text(0, "Checking."),
                tool_use(1, "toolu_01", "get_weather", *chunks),
                stop_reason="tool_use",
            )
        )
    )

    events = run(provider, conversation(), [WEATHER])

    calls = [event for event in events if isinstance(event, ToolCall)]
    assert calls == [ToolCall("toolu_01", "get_weather", {"city": "Paris"}, '{"city": "Paris"}')]
    completed = events[-1]
    assert isinstance(completed, Completed)
    assert completed.stop_reason == "tool_use"
    assert completed.items[0]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "get_weather",
        "input": {"city": "Paris"},
    }


def test_it_reports_malformed_tool_json_on_the_call(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(
        Stream(
            reply(
                tool_use(0, "toolu_02", "get_weather", '{"city": ', "Paris}"),
                stop_reason="tool_use",
            )
        )
    )

    events = run(provider, conversation(), [WEATHER])

    call = events[0]
    assert isinstance(call, ToolCall)
    assert call.arguments is None
    assert call.raw_arguments == '{"city": Paris}'
    assert call.error is not None
    assert "JSON" in call.error
    completed = events[-1]
    assert isinstance(completed, Completed)
    # Sent back, the block still needs an object input for the API to accept the next turn.
    assert completed.items[0]["content"][0]["input"] == {}


def test_it_sends_thinking_blocks_back_unchanged_with_the_tool_results(
    provider: AnthropicProvider, server: WireServer
) -> None:
    first = reply(
        thinking(0, "The user wants ", "Paris weather."),
        tool_use(1, "toolu_03", "get_weather", '{"city":', ' "Paris"}'),
        stop_reason="tool_use",
    )
    server.queue(Stream(first), Stream(reply(text(0, "It is sunny."))))
    thread = conversation()
    options = Options(model="claude-test", max_output_tokens=4096, thinking=True)

    events = run(provider, thread, [WEATHER], options)

    reasoning = [event for event in events if isinstance(event, ReasoningDelta)]
    assert reasoning == [ReasoningDelta("The user wants "), ReasoningDelta("Paris weather.")]
    completed = events[-1]
    assert isinstance(completed, Completed)
    thread.items += completed.items
    thread.items += provider.tool_results([ToolResult("toolu_03", "18°C, sunny")])
    run(provider, thread, [WEATHER], options)

    assert server.received[0].body["thinking"] == {"type": "adaptive"}
    assistant, results = server.received[1].body["messages"][1:]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "The user wants Paris weather.",
        "signature": SIGNATURE,
    }
    assert assistant == completed.items[0]
    assert SIGNATURE.encode() in server.received[1].raw
    assert results == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_03",
                "content": "18°C, sunny",
                "is_error": False,
                "cache_control": {"type": "ephemeral"},  # the conversation's moving breakpoint
            }
        ],
    }


def test_it_keeps_redacted_thinking_data(provider: AnthropicProvider, server: WireServer) -> None:
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    server.queue(Stream(reply(block(0, redacted), text(1, "Done."))))

    completed = run(provider, conversation())[-1]

    assert isinstance(completed, Completed)
    assert completed.items[0]["content"][0] == redacted


def test_it_maps_usage_including_cache_reads_and_writes(
    provider: AnthropicProvider, server: WireServer
) -> None:
    start = message_start(input_tokens=30, cache_read=1800, cache_write=250)
    server.queue(Stream(reply(text(0, "Hi"), output_tokens=42, start=start)))

    completed = run(provider, conversation())[-1]

    assert isinstance(completed, Completed)
    assert completed.usage == Usage(
        input_tokens=30, output_tokens=42, cache_read_tokens=1800, cache_write_tokens=250
    )


def test_it_puts_cache_breakpoints_on_the_last_tool_and_the_system_prompt(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "Hi"))))

    run(provider, conversation(), [WEATHER, CLOCK])

    body = server.received[0].body
    ephemeral = {"type": "ephemeral"}
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": WEATHER.description,
            "input_schema": WEATHER.input_schema,
        },
        {
            "name": "get_time",
            "description": "The time now.",
            "input_schema": {"type": "object"},
            "cache_control": ephemeral,
        },
    ]
    assert body["system"] == [
        {"type": "text", "text": "You are a careful agent.", "cache_control": ephemeral}
    ]


def test_it_moves_a_cache_breakpoint_to_the_end_of_the_conversation_each_turn(
    provider: AnthropicProvider, server: WireServer
) -> None:
    """And keeps one where the previous turn's request ended (the message before the latest
    answer), so that a turn appending many blocks still reads the thread (`test_cache`)."""
    thread = conversation()
    thread.items += [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "get_time", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "noon"}],
        },
    ]
    recorded = json.dumps(thread.items)
    server.queue(Stream(reply(text(0, "Hi"))), Stream(reply(text(0, "Hi"))))

    run(provider, thread, [CLOCK])
    run(provider, thread, [CLOCK], replace(OPTIONS, purpose="compaction"))

    turn, compaction = (received.body["messages"] for received in server.received)
    ephemeral = {"type": "ephemeral"}
    assert turn[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "noon", "cache_control": ephemeral}
    ]
    # Where the previous turn's request ended, the thread's own message otherwise unchanged.
    assert turn[0]["content"] == [{**thread.items[0]["content"][0], "cache_control": ephemeral}]
    assert json.dumps(turn[1]) == json.dumps(thread.items[1])  # the answer untouched
    assert json.dumps(compaction) == recorded  # a one-off request: no cache write for it
    assert json.dumps(thread.items) == recorded  # the thread stays as recorded


def test_it_sends_a_plain_prefix_without_caching_and_effort_in_output_config(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "Hi"))))
    options = Options(model="claude-test", cache_prefix=False, effort="low")

    run(provider, conversation(), [WEATHER], options)

    body = server.received[0].body
    assert body["system"] == "You are a careful agent."
    assert "cache_control" not in body["tools"][0]
    assert body["output_config"] == {"effort": "low"}
    assert "thinking" not in body


def test_it_asks_for_server_side_tool_result_clearing_behind_its_beta_header(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "Hi"))), Stream(reply(text(0, "Hi"))))
    clearing = ServerClearing(trigger_tokens=80_000, keep=4, clear_at_least_tokens=10_000)

    run(provider, conversation(), [WEATHER], replace(OPTIONS, server_clearing=clearing))
    run(provider, conversation(), [WEATHER])

    asked, plain = server.received
    assert asked.body["context_management"] == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 80_000},
                "keep": {"type": "tool_uses", "value": 4},
                "clear_at_least": {"type": "input_tokens", "value": 10_000},
            }
        ]
    }
    assert header(asked, "anthropic-beta") == "context-management-2025-06-27"
    assert "context_management" not in plain.body
    assert header(plain, "anthropic-beta") is None
    # Everything else is the same request: clearing changes nothing of the frozen prefix.
    assert {k: v for k, v in asked.body.items() if k != "context_management"} == plain.body


def test_it_reports_what_the_server_cleared(
    provider: AnthropicProvider, server: WireServer
) -> None:
    edits = {
        "applied_edits": [
            {
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": 8,
                "cleared_input_tokens": 50_000,
            }
        ]
    }
    server.queue(
        Stream(reply(text(0, "Hi"), context_management=edits)), Stream(reply(text(0, "Hi")))
    )

    cleared = completed(run(provider, conversation()))
    untouched = completed(run(provider, conversation()))

    assert (cleared.cleared_tool_results, cleared.cleared_tokens) == (8, 50_000)
    assert (untouched.cleared_tool_results, untouched.cleared_tokens) == (0, 0)


def test_it_counts_the_tokens_of_exactly_the_request_it_would_send(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Json({"input_tokens": 1234}), Stream(reply(text(0, "Hi"))))
    options = replace(OPTIONS, effort="high", thinking=True)

    assert provider.count_tokens(conversation(), [WEATHER, CLOCK], options) == 1234
    run(provider, conversation(), [WEATHER, CLOCK], options)

    counted, sent = server.received
    assert counted.path == "/v1/messages/count_tokens"
    assert sent.path == "/v1/messages"
    # Model, messages, system, tools (cache breakpoints included), thinking and effort alike.
    unsent = {"max_tokens", "stream"}
    assert counted.body == {k: v for k, v in sent.body.items() if k not in unsent}


def test_it_maps_a_failed_count_to_a_typed_error(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(
        Failure(429, error_body("rate_limit_error", "slow down"), {"retry-after": "3"}),
        Failure(400, error_body("invalid_request_error", "prompt is too long: 9 > 8 maximum")),
    )

    with pytest.raises(RateLimited) as limited:
        provider.count_tokens(conversation(), [], OPTIONS)
    with pytest.raises(ContextTooLong):
        provider.count_tokens(conversation(), [], OPTIONS)
    assert limited.value.retry_after == 3
    with pytest.raises(BadRequest, match="cannot be sent to Anthropic"):
        provider.count_tokens(Conversation(provider="openai", system=""), [], OPTIONS)


def test_it_reports_a_refusal_with_the_text_produced(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "I can't help with that."), stop_reason="refusal")))

    completed = run(provider, conversation())[-1]

    assert isinstance(completed, Completed)
    assert completed.stop_reason == "refusal"
    assert completed.refusal == "I can't help with that."


def test_it_maps_pause_and_unknown_stop_reasons(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "..."), stop_reason="pause_turn")))
    server.queue(Stream(reply(text(0, "..."), stop_reason="something_new")))

    paused = run(provider, conversation())[-1]
    other = run(provider, conversation())[-1]

    assert isinstance(paused, Completed)
    assert paused.stop_reason == "pause"
    assert isinstance(other, Completed)
    assert other.stop_reason == "other"


# --- Failures -------------------------------------------------------------------------------------


def test_it_maps_429_to_rate_limited_with_retry_after(
    provider: AnthropicProvider, server: WireServer
) -> None:
    body = error_body("rate_limit_error", "Number of request tokens has exceeded your rate limit.")
    error = fail(provider, Failure(429, body, {"retry-after": "7"}), server)

    assert isinstance(error, RateLimited)
    assert error.retry_after == 7.0
    assert not error.permanent
    assert len(server.received) == 1  # no SDK retries: the kernel decides


def test_it_maps_529_to_overloaded(provider: AnthropicProvider, server: WireServer) -> None:
    error = fail(provider, Failure(529, error_body("overloaded_error", "Overloaded")), server)

    assert isinstance(error, Overloaded)
    assert not error.permanent


def test_it_maps_a_mid_stream_overloaded_event_to_overloaded(
    provider: AnthropicProvider, server: WireServer
) -> None:
    events = [message_start(), ("error", error_body("overloaded_error", "Overloaded"))]

    error = fail(provider, Stream(events), server)

    assert isinstance(error, Overloaded)


def test_it_maps_500_to_server_error(provider: AnthropicProvider, server: WireServer) -> None:
    error = fail(provider, Failure(500, error_body("api_error", "Internal server error")), server)

    assert isinstance(error, ServerError)
    assert not error.permanent


def test_it_maps_401_to_a_permanent_authentication_failure(
    provider: AnthropicProvider, server: WireServer
) -> None:
    body = error_body("authentication_error", "invalid x-api-key")
    error = fail(provider, Failure(401, body), server)

    assert isinstance(error, AuthenticationFailed)
    assert error.permanent


def test_it_maps_a_missing_model_to_unknown_model(
    provider: AnthropicProvider, server: WireServer
) -> None:
    error = fail(
        provider, Failure(404, error_body("not_found_error", "model: claude-nope")), server
    )

    assert isinstance(error, UnknownModel)
    assert error.permanent


def test_it_maps_an_overlong_prompt_to_context_too_long(
    provider: AnthropicProvider, server: WireServer
) -> None:
    body = error_body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
    error = fail(provider, Failure(400, body), server)

    assert isinstance(error, ContextTooLong)
    assert error.permanent


def test_it_maps_other_400s_to_bad_request(provider: AnthropicProvider, server: WireServer) -> None:
    body = error_body("invalid_request_error", "messages: roles must alternate")
    error = fail(provider, Failure(400, body), server)

    assert isinstance(error, BadRequest)
    assert error.message == "messages: roles must alternate"


def test_it_raises_stream_interrupted_for_a_cut_stream_without_completed(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "Hello", " world", " again")), cut_after=4))
    seen: list[Event] = []

    with pytest.raises(StreamInterrupted):
        seen.extend(provider.stream(conversation(), [], OPTIONS))

    assert TextDelta("Hello") in seen
    assert not any(isinstance(event, Completed) for event in seen)


def test_it_raises_stream_interrupted_when_the_stream_ends_before_message_stop(
    provider: AnthropicProvider, server: WireServer
) -> None:
    server.queue(Stream(reply(text(0, "Hello"))[:-2]))
    seen: list[Event] = []

    with pytest.raises(StreamInterrupted):
        seen.extend(provider.stream(conversation(), [], OPTIONS))

    assert not any(isinstance(event, Completed) for event in seen)


def test_it_raises_stream_interrupted_when_nothing_listens() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = AnthropicProvider(api_key="test-key", base_url=f"http://127.0.0.1:{port}")

    with pytest.raises(StreamInterrupted):
        run(provider, conversation())


# --- Native items ---------------------------------------------------------------------------------


def test_it_builds_native_user_and_tool_result_messages() -> None:
    provider = AnthropicProvider(api_key="test-key")

    assert provider.user_message("Go on.") == {
        "role": "user",
        "content": [{"type": "text", "text": "Go on."}],
    }
    assert provider.tool_results(
        [ToolResult("toolu_1", "ok"), ToolResult("toolu_2", "boom", is_error=True)]
    ) == [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "ok",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "boom",
                    "is_error": True,
                },
            ],
        }
    ]
