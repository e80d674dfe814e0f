"""The OpenAI adapter driven through the real SDK against a local Responses API.

The streams below follow the public Responses streaming reference event by event (typed events,
each with `sequence_number`; full response objects in created / in_progress / completed), so the
SDK parses them exactly as it would parse OpenAI's.
"""

from __future__ import annotations

import socket
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
from missions.providers.openai import OpenAIProvider
from tests.providers.openai_wire import MODEL, Responses
from tests.providers.wire import Failure, Json, Received, Stream, WireServer

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def provider(server: WireServer) -> OpenAIProvider:
    return OpenAIProvider(api_key="test-key", base_url=server.url + "/v1")


def thread(*items: dict[str, Any]) -> Conversation:
    return Conversation(provider="openai", system="You are terse.", items=list(items))


def run(
    provider: OpenAIProvider,
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
    provider: OpenAIProvider, server: WireServer
) -> None:
    server.queue(Responses().message("msg_1", "Hello", ", owner.").completed())

    events = run(provider, thread(provider.user_message("Hi")))

    assert events[:2] == [TextDelta("Hello"), TextDelta(", owner.")]
    final = completed(events)
    assert final.stop_reason == "end_turn"
    assert final.items[0]["content"][0]["text"] == "Hello, owner."
    request = server.received[0]
    assert request.path == "/v1/responses"
    assert header(request, "authorization") == "Bearer test-key"
    assert request.body["instructions"] == "You are terse."
    assert request.body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
    ]
    assert request.body["stream"] is True
    assert "reasoning" not in request.body
    assert "tools" not in request.body


def test_it_assembles_a_function_call_streamed_in_three_deltas(
    provider: OpenAIProvider, server: WireServer
) -> None:
    server.queue(
        Responses()
        .function_call("fc_1", "call_1", "get_weather", '{"ci', 'ty": "Pa', 'ris"}')
        .completed()
    )

    events = run(provider, thread(provider.user_message("Weather?")), [WEATHER])

    call = ToolCall("call_1", "get_weather", {"city": "Paris"}, '{"city": "Paris"}')
    assert events[0] == call
    assert completed(events).stop_reason == "tool_use"
    assert server.received[0].body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": WEATHER.input_schema,
            "strict": False,
        }
    ]


def test_it_sends_reasoning_items_back_unchanged_with_the_tool_results(
    provider: OpenAIProvider, server: WireServer
) -> None:
    first = (
        Responses("resp_1")
        .reasoning("rs_1", "gAAAA-opaque-blob==", "Need the ", "weather.")
        .function_call("fc_1", "call_1", "get_weather", '{"city": "Paris"}')
        .completed()
    )
    server.queue(first, Responses("resp_2").message("msg_2", "Sunny.").completed())
    conversation = thread(provider.user_message("Weather in Paris?"))
    options = Options(model=MODEL, effort="medium", thinking=True)

    events = run(provider, conversation, [WEATHER], options)
    assert [e for e in events if isinstance(e, ReasoningDelta)] == [
        ReasoningDelta("Need the "),
        ReasoningDelta("weather."),
    ]
    conversation.items += completed(events).items
    conversation.items += provider.tool_results([ToolResult("call_1", "18C, sunny")])
    events = run(provider, conversation, [WEATHER], options)

    assert completed(events).stop_reason == "end_turn"
    second = server.received[1].body
    reasoning = second["input"][1]
    assert reasoning == first.events[-1][1]["response"]["output"][0]
    assert reasoning["id"] == "rs_1"
    assert reasoning["encrypted_content"] == "gAAAA-opaque-blob=="
    assert second["input"][2]["call_id"] == "call_1"
    assert second["input"][3] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "18C, sunny",
    }
    for request in server.received:
        assert request.body["store"] is False
        assert request.body["include"] == ["reasoning.encrypted_content"]
        assert request.body["reasoning"] == {"effort": "medium", "summary": "auto"}


def test_it_maps_usage_with_cached_tokens_as_cache_reads(
    provider: OpenAIProvider, server: WireServer
) -> None:
    answer = Responses().message("msg_1", "Ok.")
    server.queue(answer.completed(input_tokens=1000, output_tokens=40, cached_tokens=800))

    final = completed(run(provider, thread(provider.user_message("Hi"))))

    # OpenAI counts cached tokens inside input_tokens; the kernel sums disjoint buckets.
    assert final.usage == Usage(input_tokens=200, output_tokens=40, cache_read_tokens=800)


def test_it_takes_tool_calls_from_the_final_response_when_items_were_not_streamed(
    provider: OpenAIProvider, server: WireServer
) -> None:
    answer = Responses().function_call("fc_1", "call_1", "get_weather", '{"city": "Oslo"}')
    answer.events = [(name, data) for name, data in answer.events if "output_item" not in name]
    server.queue(answer.completed())

    events = run(provider, thread(provider.user_message("Weather?")), [WEATHER])

    assert events[0] == ToolCall("call_1", "get_weather", {"city": "Oslo"}, '{"city": "Oslo"}')
    assert completed(events).stop_reason == "tool_use"


def test_it_reports_malformed_function_arguments_as_a_tool_call_error(
    provider: OpenAIProvider, server: WireServer
) -> None:
    answer = Responses().function_call("fc_1", "call_1", "get_weather", '{"city": ', "Par")
    server.queue(answer.completed())

    events = run(provider, thread(provider.user_message("Weather?")), [WEATHER])

    call = events[0]
    assert isinstance(call, ToolCall)
    assert call.arguments is None
    assert call.raw_arguments == '{"city": Par'
    assert call.error is not None
    assert "not valid JSON" in call.error
    assert completed(events).stop_reason == "tool_use"


def test_it_stops_with_max_tokens_on_an_incomplete_response(
    provider: OpenAIProvider, server: WireServer
) -> None:
    server.queue(Responses().message("msg_1", "Once upon").incomplete("max_output_tokens"))

    final = completed(run(provider, thread(provider.user_message("A story"))))

    assert final.stop_reason == "max_tokens"
    assert final.items[0]["id"] == "msg_1"


def test_it_reports_a_refusal_with_its_text(provider: OpenAIProvider, server: WireServer) -> None:
    server.queue(Responses().message("msg_1", refusal="I can't help with that.").completed())

    events = run(provider, thread(provider.user_message("Something bad")))

    final = completed(events)
    assert final.stop_reason == "refusal"
    assert final.refusal == "I can't help with that."
    assert not [event for event in events if isinstance(event, TextDelta)]


def test_it_raises_stream_interrupted_on_a_cut_stream_without_completing(
    provider: OpenAIProvider, server: WireServer
) -> None:
    answer = Responses().message("msg_1", "Hel", "lo", " there").completed()
    server.queue(Stream(events=answer.events, cut_after=6))
    seen: list[Event] = []

    with pytest.raises(StreamInterrupted):
        seen.extend(provider.stream(thread(provider.user_message("Hi")), [], Options(MODEL)))

    assert TextDelta("Hel") in seen
    assert not [event for event in seen if isinstance(event, Completed)]


def test_it_raises_stream_interrupted_when_the_stream_ends_before_completed(
    provider: OpenAIProvider, server: WireServer
) -> None:
    answer = Responses().message("msg_1", "Hello")
    server.queue(Stream(events=answer.events))

    with pytest.raises(StreamInterrupted):
        run(provider, thread(provider.user_message("Hi")))


@pytest.mark.parametrize(
    ("status", "body", "headers", "expected", "retry_after"),
    [
        (429, {"type": "requests", "code": "rate_limit_exceeded"}, {"retry-after": "7"},
         RateLimited, 7.0),
        (429, {"type": "requests", "code": None}, {"retry-after-ms": "1500"}, RateLimited, 1.5),
        (429, {"type": "insufficient_quota", "code": "insufficient_quota"}, {},
         AuthenticationFailed, None),
        (500, {"type": "server_error", "code": None}, {}, ServerError, None),
        (502, {"type": "server_error", "code": None}, {}, ServerError, None),
        (503, {"type": "server_error", "code": None}, {"retry-after": "2"}, Overloaded, 2.0),
        (401, {"type": "invalid_request_error", "code": "invalid_api_key"}, {},
         AuthenticationFailed, None),
        (403, {"type": "invalid_request_error", "code": None}, {}, AuthenticationFailed, None),
        (404, {"type": "invalid_request_error", "code": "model_not_found"}, {}, UnknownModel,
         None),
        (400, {"type": "invalid_request_error", "code": "context_length_exceeded"}, {},
         ContextTooLong, None),
        (400, {"type": "invalid_request_error", "code": "invalid_value"}, {}, BadRequest, None),
    ],
)  # fmt: skip
def test_it_maps_http_errors_to_typed_provider_errors(
    provider: OpenAIProvider,
    server: WireServer,
    status: int,
    body: dict[str, Any],
    headers: dict[str, str],
    expected: type[ProviderError],
    retry_after: float | None,
) -> None:
    error = {"message": f"boom {status}", "param": None, **body}
    server.queue(Failure(status, {"error": error}, headers))

    with pytest.raises(expected) as raised:
        run(provider, thread(provider.user_message("Hi")))

    assert type(raised.value) is expected
    assert raised.value.retry_after == retry_after
    assert f"boom {status}" in raised.value.message
    assert len(server.received) == 1  # no SDK retries: the kernel decides


def test_it_marks_authentication_failures_permanent_and_rate_limits_not(
    provider: OpenAIProvider, server: WireServer
) -> None:
    server.queue(
        Failure(401, {"error": {"message": "bad key", "type": "invalid_request_error"}}),
        Failure(429, {"error": {"message": "slow", "type": "requests"}}, {"retry-after": "7"}),
    )

    with pytest.raises(AuthenticationFailed) as auth:
        run(provider, thread(provider.user_message("Hi")))
    with pytest.raises(RateLimited) as limited:
        run(provider, thread(provider.user_message("Hi")))

    assert auth.value.permanent is True
    assert limited.value.permanent is False
    assert limited.value.retry_after == 7.0


@pytest.mark.parametrize(
    ("code", "expected"),
    [("server_error", ServerError), ("rate_limit_exceeded", RateLimited),
     ("invalid_prompt", BadRequest)],
)  # fmt: skip
def test_it_maps_a_failed_response_to_a_typed_error(
    provider: OpenAIProvider, server: WireServer, code: str, expected: type[ProviderError]
) -> None:
    answer = Responses().message("msg_1", "Hel")
    failed = answer.response("failed", answer.output)
    failed["error"] = {"code": code, "message": "it failed"}
    answer.emit("response.failed", response=failed)
    server.queue(Stream(events=answer.events))

    with pytest.raises(expected, match="it failed"):
        run(provider, thread(provider.user_message("Hi")))


def test_a_failed_response_says_what_it_was_billed(
    provider: OpenAIProvider, server: WireServer
) -> None:
    answer = Responses().message("msg_1", "Hel")
    usage = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 123,
    }
    failed = answer.response("failed", answer.output, usage)
    failed["error"] = {"code": "server_error", "message": "it failed"}
    answer.emit("response.failed", response=failed)
    server.queue(Stream(events=answer.events))

    with pytest.raises(ServerError) as caught:
        run(provider, thread(provider.user_message("Hi")))

    assert caught.value.spent == Usage(input_tokens=20, output_tokens=3, cache_read_tokens=100)


@pytest.mark.parametrize(
    "error",
    [
        # The reference's flat form, parsed by the SDK into an `error` event...
        {"code": "context_length_exceeded", "message": "too long", "param": None},
        # ...and the nested form, which the SDK raises itself as an APIError.
        {"error": {"code": "context_length_exceeded", "message": "too long", "param": None}},
    ],
)
def test_it_maps_an_error_event_to_a_typed_error(
    provider: OpenAIProvider, server: WireServer, error: dict[str, Any]
) -> None:
    answer = Responses()
    answer.emit("error", **error)
    server.queue(Stream(events=answer.events))

    with pytest.raises(ContextTooLong, match="too long"):
        run(provider, thread(provider.user_message("Hi")))


def test_it_raises_stream_interrupted_when_the_server_is_unreachable() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIProvider(api_key="test-key", base_url=f"http://127.0.0.1:{port}/v1")

    with pytest.raises(StreamInterrupted):
        run(provider, thread(provider.user_message("Hi")))


def test_it_refuses_a_thread_from_another_provider(provider: OpenAIProvider) -> None:
    with pytest.raises(BadRequest):
        run(provider, Conversation(provider="anthropic", system="", items=[]))


def test_it_reads_the_key_and_base_url_from_the_environment(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    server.queue(Responses().message("msg_1", "Hi").completed())
    provider = OpenAIProvider()

    completed(run(provider, thread(provider.user_message("Hi"))))

    assert header(server.received[0], "authorization") == "Bearer env-key"


def test_it_fails_authentication_without_any_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)

    with pytest.raises(AuthenticationFailed):
        OpenAIProvider()


def test_it_marks_failed_tool_results_in_their_output(provider: OpenAIProvider) -> None:
    results = [ToolResult("call_1", "ok"), ToolResult("call_2", "no such city", is_error=True)]

    assert provider.tool_results(results) == [
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
        {"type": "function_call_output", "call_id": "call_2", "output": "Error: no such city"},
    ]


def test_it_counts_the_input_tokens_of_exactly_the_request_it_would_send(
    provider: OpenAIProvider, server: WireServer
) -> None:
    server.queue(
        Json({"object": "response.input_tokens", "input_tokens": 4321}),
        Responses().message("msg_1", "Sunny.").completed(),
    )
    conversation = thread(provider.user_message("Weather in Paris?"))
    options = Options(model=MODEL, effort="low")

    assert provider.count_tokens(conversation, [WEATHER], options) == 4321
    run(provider, conversation, [WEATHER], options)

    counted, sent = server.received
    assert counted.path == "/v1/responses/input_tokens"
    assert sent.path == "/v1/responses"
    for field in ("model", "instructions", "input", "tools", "reasoning"):
        assert counted.body[field] == sent.body[field], field
    assert "prompt_cache_key" not in sent.body  # only when the options name a thread


def test_it_maps_a_failed_count_to_a_typed_error(
    provider: OpenAIProvider, server: WireServer
) -> None:
    server.queue(
        Failure(429, {"error": {"message": "slow", "type": "requests"}}, {"retry-after": "2"}),
        Failure(400, {"error": {"message": "too long", "code": "context_length_exceeded"}}),
    )
    conversation = thread(provider.user_message("Hi"))

    with pytest.raises(RateLimited) as limited:
        provider.count_tokens(conversation, [], Options(model=MODEL))
    with pytest.raises(ContextTooLong):
        provider.count_tokens(conversation, [], Options(model=MODEL))
    assert limited.value.retry_after == 2
    with pytest.raises(BadRequest, match="cannot be sent to OpenAI"):
        provider.count_tokens(Conversation(provider="anthropic", system=""), [], Options(MODEL))
