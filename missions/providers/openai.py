"""OpenAI through the Responses API, streamed and stateless.

Stateless means `store=False`: OpenAI keeps nothing between requests, so every request carries
the whole thread (`Conversation.items`, sent untouched). Reasoning survives from one turn to the
next only because we ask for `reasoning.encrypted_content` and the loop appends the response's
output items, reasoning items included, exactly as received (docs/design.md §12).

Usage is reported in disjoint buckets, as `kernel.budgets.Cost` sums them: OpenAI counts cached
(and cache-written) tokens inside `input_tokens`, so they are taken out of `input_tokens` here.

`import openai` below is the SDK, not this module: imports are absolute and this file is only
ever imported as `missions.providers.openai`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, cast

import openai
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseCompletedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInputParam,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseTextDeltaEvent,
)
from openai.types.shared_params import Reasoning

from agentos.core import scrubber
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
    StopReason,
    StreamInterrupted,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolSpec,
    UnknownModel,
    Usage,
    Watch,
)
from missions.providers.cutting import Cut, cuttable

# Error codes OpenAI puts in error bodies, `error` events and failed responses. They win over
# the HTTP status: a 429 `insufficient_quota` is an unpaid account, not a busy one, and retrying
# it would only burn the run's retries, so it is permanent like a bad key.
_ERRORS_BY_CODE: dict[str, type[ProviderError]] = {
    "context_length_exceeded": ContextTooLong,
    "model_not_found": UnknownModel,
    "insufficient_quota": AuthenticationFailed,
    "rate_limit_exceeded": RateLimited,
    "server_error": ServerError,
    "vector_store_timeout": ServerError,
}

# Why an `incomplete` response stopped; a content filter cut is treated like a refusal.
_INCOMPLETE_STOPS: dict[str, StopReason] = {
    "max_output_tokens": "max_tokens",
    "content_filter": "refusal",
}


class OpenAIProvider:
    name = "openai"
    counts_tokens = True
    caches_prompts = True  # automatic, by prefix, from 1,024 tokens
    clearing_capability: str | None = None  # the Responses API clears nothing on its side

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 0,
        client: openai.OpenAI | None = None,
    ) -> None:
        # None lets the SDK read OPENAI_API_KEY / OPENAI_BASE_URL. No SDK retries by default:
        # the kernel owns retries, so it can journal them and honour `retry_after` itself.
        if client is None:
            try:
                client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries)
            except openai.OpenAIError as exc:  # no key given and none in the environment
                raise AuthenticationFailed(str(exc)) from exc
        self.client = client

    def stream(
        self,
        conversation: Conversation,
        tools: list[ToolSpec],
        options: Options,
        *,
        abort: Watch | None = None,
    ) -> Iterator[Event]:
        if conversation.provider != self.name:
            raise BadRequest(f"a {conversation.provider!r} thread cannot be sent to OpenAI")
        # Usage comes with `response.completed` only: a cut answer's is not known.
        with cuttable(abort) as cut:
            try:
                yield from self._stream(conversation, tools, options, cut)
            except openai.APIStatusError as exc:
                raise status_error(exc) from exc
            except openai.APIConnectionError as exc:  # refused, timed out, or dropped mid-stream
                raise StreamInterrupted(exc.message) from exc
            except openai.APIError as exc:  # an error object the SDK found inside the stream
                raise _coded_error(exc.code, exc.message) from exc

    def count_tokens(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options
    ) -> int:
        """`POST /v1/responses/input_tokens` with what `stream` would send (nothing generated)."""
        if conversation.provider != self.name:
            raise BadRequest(f"a {conversation.provider!r} thread cannot be sent to OpenAI")
        try:
            counted = self.client.responses.input_tokens.count(
                model=options.model,
                instructions=conversation.system,
                input=cast(ResponseInputParam, conversation.items),
                tools=[_function_tool(spec) for spec in tools] if tools else openai.omit,
                reasoning=_reasoning(options) or openai.omit,
                timeout=options.timeout_seconds,
            )
        except openai.APIStatusError as exc:
            raise status_error(exc) from exc
        except openai.APIConnectionError as exc:
            raise StreamInterrupted(exc.message) from exc
        return counted.input_tokens

    def _stream(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options, cut: Cut
    ) -> Iterator[Event]:
        stream = self.client.responses.create(
            model=options.model,
            instructions=scrubber.scrub_value(conversation.system),
            # Native items (ours and the model's own), passed through without conversion but for
            # the secrets the product knows (a key a tool printed never leaves in a request).
            input=cast(
                ResponseInputParam,
                scrubber.scrub_value(conversation.items, opaque=scrubber.PROVIDER_OPAQUE),
            ),
            tools=[_function_tool(spec) for spec in tools] if tools else openai.omit,
            max_output_tokens=options.max_output_tokens,
            reasoning=_reasoning(options) or openai.omit,
            prompt_cache_key=options.cache_key or openai.omit,
            store=False,
            include=["reasoning.encrypted_content"],
            stream=True,
            timeout=options.timeout_seconds,
        )
        streamed_arguments: dict[str, str] = {}  # function_call item id -> argument text so far
        announced: set[str] = set()  # call ids already yielded as ToolCall
        cut.attach(stream.response)
        with stream:
            for event in stream:
                match event:
                    case ResponseTextDeltaEvent():
                        yield TextDelta(event.delta)
                    case ResponseReasoningSummaryTextDeltaEvent():
                        yield ReasoningDelta(event.delta)
                    case ResponseFunctionCallArgumentsDeltaEvent():
                        streamed_arguments[event.item_id] = (
                            streamed_arguments.get(event.item_id, "") + event.delta
                        )
                    case ResponseOutputItemDoneEvent(item=ResponseFunctionToolCall() as call):
                        announced.add(call.call_id)
                        yield _tool_call(call, streamed_arguments.get(call.id or "", ""))
                    case ResponseCompletedEvent() | ResponseIncompleteEvent():
                        # A server that skipped `output_item.done` (some OpenAI-compatible
                        # ones do) still gets every call answered: the API rejects a thread
                        # holding a function_call without its function_call_output.
                        for item in event.response.output:
                            if not isinstance(item, ResponseFunctionToolCall):
                                continue
                            if item.call_id not in announced:
                                yield _tool_call(item, "")
                        yield _completed(event.response)
                        return
                    case ResponseFailedEvent():
                        error = event.response.error
                        message = error.message if error else "the response failed"
                        failed = _coded_error(error.code if error else None, message)
                        # What the failed answer was billed, when the server says.
                        failed.spent = _usage(event.response) if event.response.usage else None
                        raise failed
                    case ResponseErrorEvent():
                        raise _coded_error(event.code, event.message)
        # The body ended cleanly but early: a partial response is never reported as Completed.
        raise StreamInterrupted("the stream ended before response.completed")

    def user_message(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "input_text", "text": text}]}

    def tool_results(self, results: list[ToolResult]) -> list[dict[str, Any]]:
        # function_call_output has no error flag, so a failure is said in the text itself.
        return [
            {
                "type": "function_call_output",
                "call_id": result.call_id,
                "output": f"Error: {result.output}" if result.is_error else result.output,
            }
            for result in results
        ]


def _reasoning(options: Options) -> Reasoning | None:
    """Reasoning summaries (and the effort) when asked for; None leaves the model's default."""
    if options.effort is None and not options.thinking:
        return None
    reasoning: Reasoning = {"summary": "auto"}
    if options.effort is not None:
        reasoning["effort"] = options.effort
    return reasoning


def _function_tool(spec: ToolSpec) -> FunctionToolParam:
    # Not strict: strict mode demands every property be required and no additionalProperties,
    # which our tools' schemas do not promise; arguments are validated by the tool instead.
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.input_schema,
        "strict": False,
    }


def _tool_call(call: ResponseFunctionToolCall, streamed: str) -> ToolCall:
    # The finished item's `arguments` is authoritative; the deltas are the fallback.
    raw = call.arguments or streamed
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(call.call_id, call.name, None, raw, f"arguments are not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return ToolCall(call.call_id, call.name, None, raw, "arguments are not a JSON object")
    return ToolCall(call.call_id, call.name, arguments, raw)


def _completed(response: Response) -> Completed:
    # `to_dict` keeps exactly the fields the server sent (unset ones are left out, unknown ones
    # kept), so the items can be appended to the next request's input unchanged.
    items = [item.to_dict(mode="json") for item in response.output]
    refusal = next(
        (
            part.refusal
            for item in response.output
            if isinstance(item, ResponseOutputMessage)
            for part in item.content
            if isinstance(part, ResponseOutputRefusal)
        ),
        None,
    )
    details = response.incomplete_details
    stop: StopReason = "end_turn"
    # Tool use first: every function_call appended must be answered, even in a cut response.
    if any(isinstance(item, ResponseFunctionToolCall) for item in response.output):
        stop = "tool_use"
    elif response.status == "incomplete":
        reason = details.reason if details else None
        stop = _INCOMPLETE_STOPS.get(reason or "", "other")
    elif refusal is not None:
        stop = "refusal"
    return Completed(stop_reason=stop, usage=_usage(response), items=items, refusal=refusal)


def _usage(response: Response) -> Usage:
    usage = response.usage
    if usage is None:
        return Usage()
    # Details are a breakdown of input_tokens; getattr because compatible servers omit them.
    details = getattr(usage, "input_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    written = getattr(details, "cache_write_tokens", 0) or 0
    return Usage(
        input_tokens=max(usage.input_tokens - cached - written, 0),
        output_tokens=usage.output_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def status_error(exc: openai.APIStatusError) -> ProviderError:
    status, message = exc.status_code, exc.message
    retry_after = _retry_after(exc.response.headers)
    if exc.code in _ERRORS_BY_CODE:
        return _ERRORS_BY_CODE[exc.code](message, retry_after=retry_after)
    if status == 429:
        return RateLimited(message, retry_after=retry_after)
    if status in (401, 403):
        return AuthenticationFailed(message)
    if status == 404:  # a stateless create names no other resource than the model
        return UnknownModel(message)
    # 503 is OpenAI's "slow down"/"overloaded": capacity, not a fault, so the kernel may back
    # off longer (or fail over at a sub-agent boundary) instead of counting a server error.
    if status == 503:
        return Overloaded(message, retry_after=retry_after)
    if status >= 500 or status in (408, 409):  # 408/409: timed out, or a concurrent conflict
        return ServerError(message, retry_after=retry_after)
    return BadRequest(message)


def _coded_error(code: str | None, message: str) -> ProviderError:
    # In-stream failures carry a code but no status. Without a code it is the server's fault;
    # an unknown code is one of the many invalid-input ones (prompt, image, policy): permanent.
    if code is None:
        return ServerError(message)
    return _ERRORS_BY_CODE.get(code, BadRequest)(message)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    # `retry-after-ms` is OpenAI's precise form; `retry-after` is whole seconds (OpenAI never
    # sends the HTTP-date form, so it is ignored rather than guessed at).
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(float(value) / scale, 0.0)
            except ValueError:
                continue
    return None
