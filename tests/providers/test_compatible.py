"""The OpenAI-compatible adapter driven through the real `openai` SDK against a local server that
speaks Chat Completions as llama.cpp, vLLM and Ollama do (bare `data:` chunks, `[DONE]`)."""

from __future__ import annotations

import socket
from collections.abc import Generator
from typing import Any

import pytest

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
    ServerError,
    StreamInterrupted,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolSpec,
    UnknownModel,
    Usage,
)
from missions.providers.compatible import CompatibleProvider
from tests.polling import wait_for
from tests.providers.compatible_wire import MODEL, Chat
from tests.providers.wire import Failure, Received, Stream, WireServer

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def provider(server: WireServer) -> CompatibleProvider:
    return CompatibleProvider(base_url=server.url + "/v1", api_key="local-key")


def thread(*items: dict[str, Any]) -> Conversation:
    return Conversation(provider="compatible", system="You are terse.", items=list(items))


def run(
    provider: CompatibleProvider,
    conversation: Conversation,
    tools: list[ToolSpec] | None = None,
    options: Options | None = None,
) -> list[Event]:
    return list(provider.stream(conversation, tools or [], options or Options(model=MODEL)))


def header(request: Received, name: str) -> str | None:
    return {key.lower(): value for key, value in request.headers.items()}.get(name)


def completed(events: list[Event]) -> Completed:
    finals = [event for event in events if isinstance(event, Completed)]
    assert len(finals) == 1
    assert events[-1] is finals[0]
    return finals[0]


def test_it_streams_text_deltas_then_completes_with_end_turn(
    provider: CompatibleProvider, server: WireServer
) -> None:
    server.queue(Chat().text("Hello", ", owner.").finish())

    events = run(provider, thread(provider.user_message("Hi")))

    assert events[:2] == [TextDelta("Hello"), TextDelta(", owner.")]
    final = completed(events)
    assert final.stop_reason == "end_turn"
    assert final.usage == Usage(input_tokens=30, output_tokens=12)
    assert final.items == [{"role": "assistant", "content": "Hello, owner."}]
    request = server.received[0]
    assert request.path == "/v1/chat/completions"
    assert header(request, "authorization") == "Bearer local-key"
    assert request.body["model"] == MODEL
    assert request.body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
    ]
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["max_tokens"] == 8192
    # Parameters many compatible servers refuse are never sent.
    for absent in ("tools", "reasoning_effort", "prompt_cache_key", "store"):
        assert absent not in request.body


def test_it_assembles_two_tool_calls_streamed_interleaved_across_chunks(
    provider: CompatibleProvider, server: WireServer
) -> None:
    chat = Chat().text("Checking.")
    chat.tool_call(0, "call_a", "get_weather", '{"ci', 'ty": "Pa')
    chat.tool_call(1, "call_b", "get_weather", '{"city"')
    chat.delta(tool_calls=[{"index": 0, "function": {"arguments": 'ris"}'}}])
    chat.delta(tool_calls=[{"index": 1, "function": {"arguments": ': "Oslo"}'}}])
    server.queue(chat.finish("tool_calls"))

    events = run(provider, thread(provider.user_message("Weather?")), [WEATHER])

    calls = [event for event in events if isinstance(event, ToolCall)]
    assert calls == [
        ToolCall("call_a", "get_weather", {"city": "Paris"}, '{"city": "Paris"}'),
        ToolCall("call_b", "get_weather", {"city": "Oslo"}, '{"city": "Oslo"}'),
    ]
    final = completed(events)
    assert final.stop_reason == "tool_use"
    assert final.items == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
            ],
        }
    ]
    assert server.received[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER.input_schema,
            },
        }
    ]


def test_it_sends_the_thread_back_unchanged_with_tool_messages(
    provider: CompatibleProvider, server: WireServer
) -> None:
    server.queue(
        Chat().tool_call(0, "call_1", "get_weather", '{"city": "Paris"}').finish("tool_calls"),
        Chat().text("Sunny.").finish(),
    )
    conversation = thread(provider.user_message("Weather?"))
    first = completed(run(provider, conversation, [WEATHER]))
    conversation.items.extend(first.items)
    conversation.items.extend(
        provider.tool_results(
            [ToolResult("call_1", "22 °C"), ToolResult("call_2", "no such city", is_error=True)]
        )
    )

    second = completed(run(provider, conversation, [WEATHER]))

    assert second.stop_reason == "end_turn"
    assert first.items[0]["content"] is None  # tool calls only: no text, as OpenAI sends it
    assert server.received[1].body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather?"},
        *first.items,
        {"role": "tool", "tool_call_id": "call_1", "content": "22 °C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such city"},
    ]


def test_it_answers_tool_calls_a_server_finished_with_stop(
    provider: CompatibleProvider, server: WireServer
) -> None:
    # Ollama's way: the whole call in one delta, and `stop` as the finish reason.
    chat = Chat().delta(
        tool_calls=[
            {"index": 0, "id": "call_9", "function": {"name": "get_weather", "arguments": "{}"}}
        ]
    )
    server.queue(chat.finish("stop"))

    events = run(provider, thread(provider.user_message("Weather?")), [WEATHER])

    assert events[0] == ToolCall("call_9", "get_weather", {}, "{}")
    assert completed(events).stop_reason == "tool_use"


def test_it_names_calls_a_server_sent_without_id_or_index(
    provider: CompatibleProvider, server: WireServer
) -> None:
    chat = Chat().delta(tool_calls=[{"function": {"name": "get_weather", "arguments": "{}"}}])
    server.queue(chat.finish("tool_calls"))

    events = run(provider, thread(provider.user_message("Weather?")), [WEATHER])

    call = events[0]
    assert isinstance(call, ToolCall)
    assert call.call_id.startswith("call_")
    assert completed(events).items[0]["tool_calls"][0]["id"] == call.call_id


def test_it_reports_malformed_arguments_as_a_tool_call_error(
    provider: CompatibleProvider, server: WireServer
) -> None:
    server.queue(Chat().tool_call(0, "call_1", "get_weather", '{"city": ').finish("tool_calls"))

    events = run(provider, thread(provider.user_message("Weather?")), [WEATHER])

    call = events[0]
    assert isinstance(call, ToolCall)
    assert call.arguments is None
    assert call.raw_arguments == '{"city": '
    assert call.error is not None
    assert "not valid JSON" in call.error


def test_it_streams_reasoning_content_as_reasoning_deltas(
    provider: CompatibleProvider, server: WireServer
) -> None:
    server.queue(Chat().reasoning("Think", "ing.").text("Done.").finish())

    events = run(provider, thread(provider.user_message("Hi")))

    assert events[:3] == [ReasoningDelta("Think"), ReasoningDelta("ing."), TextDelta("Done.")]
    # The reasoning is not sent back: these servers' chat templates drop or refuse it.
    assert completed(events).items == [{"role": "assistant", "content": "Done."}]


@pytest.mark.parametrize(
    ("reason", "stop"),
    [("length", "max_tokens"), ("content_filter", "refusal"), ("abort", "other")],
)
def test_it_maps_finish_reasons(
    provider: CompatibleProvider, server: WireServer, reason: str, stop: str
) -> None:
    server.queue(Chat().text("Par").finish(reason))

    assert completed(run(provider, thread(provider.user_message("Hi")))).stop_reason == stop


def test_it_counts_zero_when_the_server_reports_no_usage(
    provider: CompatibleProvider, server: WireServer
) -> None:
    server.queue(Chat().text("Hi.").finish_without_usage())

    assert completed(run(provider, thread(provider.user_message("Hi")))).usage == Usage()


def test_it_counts_prefix_cache_hits_apart(
    provider: CompatibleProvider, server: WireServer
) -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "total_tokens": 105,
        "prompt_tokens_details": {"cached_tokens": 64},
    }
    server.queue(Chat().text("Hi.").finish(usage=usage))

    final = completed(run(provider, thread(provider.user_message("Hi"))))

    assert final.usage == Usage(input_tokens=36, output_tokens=5, cache_read_tokens=64)


def test_it_drops_stream_options_for_a_server_that_refuses_them(
    provider: CompatibleProvider, server: WireServer
) -> None:
    refusal = {"error": {"message": "Unrecognized request argument: stream_options", "code": 400}}
    server.queue(
        Failure(400, refusal),
        Chat().text("Hi.").finish_without_usage(),
        Chat().text("Again.").finish_without_usage(),
    )

    first = completed(run(provider, thread(provider.user_message("Hi"))))
    second = completed(run(provider, thread(provider.user_message("Hi"))))

    assert first.usage == second.usage == Usage()
    assert "stream_options" in server.received[0].body
    assert "stream_options" not in server.received[1].body
    assert "stream_options" not in server.received[2].body  # remembered for this endpoint


@pytest.mark.parametrize(
    ("status", "error", "headers", "expected", "retry_after"),
    [
        (429, {"message": "slow down", "type": "requests"}, {"retry-after": "3"}, RateLimited,
         3.0),
        (401, {"message": "Invalid API Key", "type": "invalid_request_error"}, {},
         AuthenticationFailed, None),
        (404, {"message": "model 'llama9' not found", "type": "api_error"}, {}, UnknownModel,
         None),
        # llama.cpp's words and type for an over-long prompt.
        (400, {"message": "the request exceeds the available context size (8192 tokens)",
               "type": "exceed_context_size_error"}, {}, ContextTooLong, None),
        # vLLM's.
        (400, {"message": "This model's maximum context length is 4096 tokens.",
               "type": "BadRequestError"}, {}, ContextTooLong, None),
        (400, {"message": "temperature must be positive", "type": "invalid_request_error"}, {},
         BadRequest, None),
        (500, {"message": "CUDA out of memory", "type": "server_error"}, {}, ServerError, None),
        (503, {"message": "Loading model", "type": "unavailable_error"}, {}, Overloaded, None),
    ],
)  # fmt: skip
def test_it_maps_error_statuses_to_typed_provider_errors(
    provider: CompatibleProvider,
    server: WireServer,
    status: int,
    error: dict[str, Any],
    headers: dict[str, str],
    expected: type[ProviderError],
    retry_after: float | None,
) -> None:
    server.queue(Failure(status, {"error": {**error, "code": status}}, headers))

    with pytest.raises(expected) as raised:
        run(provider, thread(provider.user_message("Hi")))

    assert type(raised.value) is expected
    assert raised.value.retry_after == retry_after
    assert error["message"] in raised.value.message
    # Retryable or not, as the kernel reads it: a refused key or an unknown model never is.
    assert raised.value.permanent is (status in (400, 401, 404))
    assert len(server.received) == 1  # no SDK retries: the kernel decides


def test_it_maps_an_error_chunk_mid_stream_to_a_retryable_server_error(
    provider: CompatibleProvider, server: WireServer
) -> None:
    chat = Chat().text("Par")
    chat.events.append(("", {"error": {"message": "worker crashed", "type": "server_error"}}))
    server.queue(Stream(events=chat.events, done=True))
    seen: list[Event] = []

    with pytest.raises(ServerError, match="worker crashed"):
        seen.extend(provider.stream(thread(provider.user_message("Hi")), [], Options(MODEL)))

    assert not [event for event in seen if isinstance(event, Completed)]


def test_it_raises_stream_interrupted_on_a_cut_stream_without_completing(
    provider: CompatibleProvider, server: WireServer
) -> None:
    answer = Chat().text("Hel", "lo", " there").finish()
    server.queue(Stream(events=answer.events, cut_after=3))
    seen: list[Event] = []

    with pytest.raises(StreamInterrupted):
        seen.extend(provider.stream(thread(provider.user_message("Hi")), [], Options(MODEL)))

    assert TextDelta("Hel") in seen
    assert not [event for event in seen if isinstance(event, Completed)]


def test_it_raises_stream_interrupted_when_the_stream_ends_without_a_finish_reason(
    provider: CompatibleProvider, server: WireServer
) -> None:
    server.queue(Stream(events=Chat().text("Hello").events, done=True))

    with pytest.raises(StreamInterrupted):
        run(provider, thread(provider.user_message("Hi")))


def test_it_raises_stream_interrupted_when_the_server_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = CompatibleProvider(base_url=f"http://127.0.0.1:{port}/v1")

    with pytest.raises(StreamInterrupted):
        run(provider, thread(provider.user_message("Hi")))


def test_it_hangs_up_on_the_server_when_the_caller_stops_reading(
    provider: CompatibleProvider, server: WireServer
) -> None:
    answer = Chat().text("One", "Two", "Three").finish()
    server.queue(Stream(events=answer.events, hold_after=2))
    events = provider.stream(thread(provider.user_message("Hi")), [], Options(MODEL))
    assert isinstance(events, Generator)

    assert next(events) == TextDelta("One")
    events.close()  # what the loop does when its run is cancelled mid-answer

    wait_for(lambda: server.hangups, timeout=3, message="the server to see the hang-up")
    assert server.hangups == 1


def test_it_never_sends_the_openai_key_from_the_environment(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-owners-openai-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    provider = CompatibleProvider(base_url=server.url + "/v1")
    server.queue(Chat().text("Hi.").finish())

    completed(run(provider, thread(provider.user_message("Hi"))))

    request = server.received[0]
    assert header(request, "authorization") == "Bearer no-key"
    assert b"sk-the-owners-openai-key" not in request.raw


def test_it_refuses_a_thread_from_another_provider(provider: CompatibleProvider) -> None:
    with pytest.raises(BadRequest):
        run(provider, Conversation(provider="openai", system="", items=[]))


def test_it_marks_failed_tool_results_in_their_content(provider: CompatibleProvider) -> None:
    assert provider.tool_results([ToolResult("c1", "boom", is_error=True)]) == [
        {"role": "tool", "tool_call_id": "c1", "content": "Error: boom"}
    ]
