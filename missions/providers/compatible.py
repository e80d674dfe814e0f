"""Any OpenAI-compatible endpoint (llama.cpp, vLLM, Ollama, LM Studio…) through Chat Completions.

Those servers implement `POST /chat/completions`, not the Responses API of `openai.py`, and each
implements it a little differently, so the stream is read as plain dicts (`to_dict`): a field a
server leaves out is absent, a field it adds (`reasoning_content`) is kept. The thread is Chat
Completions messages, sent untouched with the system prompt in front.

What servers disagree on, and how it is absorbed:
- tool-call deltas are assembled by their `index`; a server that sends no index gets the call's
  position, one that sends no id gets one of ours (the journal records it, so a replay agrees);
- `stream_options.include_usage` is refused by some: asked for, and dropped for this endpoint
  after the first refusal that names it; no usage at all counts zero tokens;
- a finish reason of `stop` with tool calls (Ollama) still means the calls must be answered.

The key is never taken from OpenAI's environment: the endpoint is usually someone else's server.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any, cast

import openai
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from agentos.core import scrubber
from missions.providers.base import (
    BadRequest,
    Completed,
    ContextTooLong,
    Conversation,
    Event,
    Options,
    ProviderError,
    ReasoningDelta,
    ServerError,
    StopReason,
    StreamInterrupted,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    Watch,
)
from missions.providers.cutting import Cut, cuttable
from missions.providers.openai import status_error

NAME = "compatible"
# The SDK refuses to build a client without a key; a server that checks none ignores this one.
NO_KEY = "no-key"

_STOPS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

# How llama.cpp, vLLM and Ollama word an over-long prompt (none of them sends OpenAI's code).
_CONTEXT_WORDS = re.compile(
    r"context length|context size|context window|maximum context|exceed_context_size|"
    r"too many tokens|prompt is too long",
    re.IGNORECASE,
)


class CompatibleProvider:
    name = NAME
    counts_tokens = False  # Chat Completions has no counting endpoint: the loop estimates
    # Whether the owner's server caches prefixes is not known: old tool results are cleared as
    # for a provider without a cache.
    caches_prompts = False
    clearing_capability: str | None = None

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        max_retries: int = 0,
        client: openai.OpenAI | None = None,
    ) -> None:
        # Explicit key and URL, so the SDK reads neither OPENAI_API_KEY nor OPENAI_BASE_URL: the
        # owner's OpenAI key must never be sent to another server. No SDK retries: the kernel's.
        self.client = client or openai.OpenAI(
            api_key=api_key or NO_KEY, base_url=base_url, max_retries=max_retries
        )
        self.include_usage = True

    def stream(
        self,
        conversation: Conversation,
        tools: list[ToolSpec],
        options: Options,
        *,
        abort: Watch | None = None,
    ) -> Iterator[Event]:
        if conversation.provider != self.name:
            raise BadRequest(
                f"a {conversation.provider!r} thread cannot be sent to the compatible endpoint"
            )
        # Usage comes in the last chunk only: a cut answer's is not known.
        with cuttable(abort) as cut:
            try:
                yield from self._stream(conversation, tools, options, cut)
            except openai.APIStatusError as exc:
                raise error_from_status(exc) from exc
            except openai.APIConnectionError as exc:  # refused, timed out, or dropped mid-stream
                raise StreamInterrupted(exc.message) from exc
            except openai.APIError as exc:  # an `{"error": ...}` chunk inside the stream
                raise _in_stream_error(exc.message) from exc

    def count_tokens(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options
    ) -> int:
        # Never called while `counts_tokens` is False; the protocol wants an answer anyway.
        sent = [conversation.system, conversation.items, [_tool(spec) for spec in tools]]
        return len(json.dumps(sent)) // 4

    def _stream(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options, cut: Cut
    ) -> Iterator[Event]:
        try:
            stream = self._create(conversation, tools, options)
        except openai.BadRequestError as exc:
            if not (self.include_usage and "stream_options" in exc.message):
                raise
            # This server does not know `stream_options`: the request is the same without it,
            # and the answer's usage (if any) counts; zero if it sends none.
            self.include_usage = False
            stream = self._create(conversation, tools, options)
        cut.attach(stream.response)
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, dict[str, str]] = {}  # tool-call index -> id, name, arguments so far
        finish: str | None = None
        usage: dict[str, Any] | None = None
        with stream:
            for chunk in stream:
                data = cast(dict[str, Any], chunk.to_dict(mode="json"))
                usage = data.get("usage") or usage  # the last chunk, or with the finish
                for choice in data.get("choices") or []:
                    if choice.get("index", 0) != 0:
                        continue  # n=1 is asked; a server's extra choices are not ours
                    delta = choice.get("delta") or {}
                    thought = delta.get("reasoning_content") or delta.get("reasoning")
                    if isinstance(thought, str) and thought:
                        yield ReasoningDelta(thought)
                    if isinstance(delta.get("content"), str) and delta["content"]:
                        text.append(delta["content"])
                        yield TextDelta(delta["content"])
                    if isinstance(delta.get("refusal"), str):
                        refusal.append(delta["refusal"])
                    for position, part in enumerate(delta.get("tool_calls") or []):
                        _grow(calls, position, part)
                    finish = choice.get("finish_reason") or finish
        if finish is None:
            # The body ended without a finish reason: a partial answer is never Completed.
            raise StreamInterrupted("the stream ended before a finish reason")
        assembled = [calls[index] for index in sorted(calls)]
        for call in assembled:
            yield _tool_call(call)
        stop: StopReason = "tool_use" if assembled else _STOPS.get(finish, "other")
        said = "".join(refusal) or None
        if said is not None and stop == "end_turn":
            stop = "refusal"
        yield Completed(
            stop_reason=stop,
            usage=_usage(usage),
            items=[_assistant_item("".join(text), assembled, said)],
            refusal=said if stop == "refusal" else None,
        )

    def _create(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options
    ) -> openai.Stream[ChatCompletionChunk]:
        # No effort, reasoning or cache key: few compatible servers know them, and some refuse
        # a request carrying a parameter they do not know.
        messages: list[dict[str, Any]] = []
        if conversation.system:
            messages.append({"role": "system", "content": conversation.system})
        messages.extend(conversation.items)
        return self.client.chat.completions.create(
            model=options.model,
            # No secret the product knows (a key a tool printed) leaves in a request.
            messages=cast(list[ChatCompletionMessageParam], scrubber.scrub_value(messages)),
            tools=[_tool(spec) for spec in tools] if tools else openai.omit,
            max_tokens=options.max_output_tokens,
            stream=True,
            stream_options={"include_usage": True} if self.include_usage else openai.omit,
            timeout=options.timeout_seconds,
        )

    def user_message(self, text: str) -> dict[str, Any]:
        # A plain string: older servers and chat templates take no content lists.
        return {"role": "user", "content": text}

    def tool_results(self, results: list[ToolResult]) -> list[dict[str, Any]]:
        # A tool message has no error flag, so a failure is said in the text itself.
        return [
            {
                "role": "tool",
                "tool_call_id": result.call_id,
                "content": f"Error: {result.output}" if result.is_error else result.output,
            }
            for result in results
        ]


def _tool(spec: ToolSpec) -> ChatCompletionToolParam:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.input_schema,
        },
    }


def _grow(calls: dict[int, dict[str, str]], position: int, part: dict[str, Any]) -> None:
    index = part.get("index")
    call = calls.setdefault(
        index if isinstance(index, int) else position, {"id": "", "name": "", "arguments": ""}
    )
    if part.get("id") and not call["id"]:
        call["id"] = part["id"]
    function = part.get("function") or {}
    # The name comes whole in one delta; a server that repeats it on every delta is not
    # concatenated into `get_weatherget_weather`.
    if function.get("name") and not call["name"]:
        call["name"] = function["name"]
    if isinstance(function.get("arguments"), str):
        call["arguments"] += function["arguments"]


def _tool_call(call: dict[str, str]) -> ToolCall:
    if not call["id"]:
        call["id"] = f"call_{uuid.uuid4().hex[:24]}"
    raw = call["arguments"]
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(call["id"], call["name"], None, raw, f"arguments are not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return ToolCall(call["id"], call["name"], None, raw, "arguments are not a JSON object")
    return ToolCall(call["id"], call["name"], arguments, raw)


def _assistant_item(text: str, calls: list[dict[str, str]], refusal: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        item["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"] or "{}"},
            }
            for call in calls
        ]
    if refusal is not None:
        item["refusal"] = refusal
    return item


def _usage(usage: dict[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    prompt = _tokens(usage.get("prompt_tokens"))
    # vLLM and OpenAI report prefix-cache hits inside prompt_tokens; kept apart like openai.py.
    cached = _tokens((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=_tokens(usage.get("completion_tokens")),
        cache_read_tokens=cached,
    )


def _tokens(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def error_from_status(exc: openai.APIStatusError) -> ProviderError:
    """OpenAI's mapping (429 rate limited, 401/403 refused, 404 no such model, 503 overloaded,
    5xx server error…), plus the over-long prompt as these servers word it."""
    error = status_error(exc)
    if isinstance(error, BadRequest) and _CONTEXT_WORDS.search(f"{exc.message} {exc.body}"):
        return ContextTooLong(error.message)
    return error


def _in_stream_error(message: str) -> ProviderError:
    # A server that fails mid-answer (out of memory, a crashed worker) sends no code: its fault,
    # so retryable, unless it says the prompt was too long.
    if _CONTEXT_WORDS.search(message):
        return ContextTooLong(message)
    return ServerError(message)
