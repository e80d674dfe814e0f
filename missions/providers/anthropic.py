"""Anthropic adapter: the Messages API, streamed through the official SDK.

The thread stays in Anthropic's native shape. `Completed.items` is the assistant message rebuilt
block by block from the raw stream events, with each block kept exactly as the server sent it:
the API checks thinking signatures when a tool loop sends them back on the next turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import anthropic
import httpx2
from anthropic.types import (
    MessageParam,
    OutputConfigParam,
    RawMessageStreamEvent,
    TextBlockParam,
    ThinkingConfigParam,
    ToolParam,
)

from agentos.core import scrubber
from missions.providers.base import (
    Aborted,
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
from missions.providers.cutting import cuttable

STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    # The output was cut by the context window instead of max_tokens: for the loop it is the same
    # "truncated answer" case.
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
    "pause_turn": "pause",
}
DEFAULT_REFUSAL = "The model declined to answer."
# Anthropic states no error code for an over-long prompt, only the wording of a 400
# ("prompt is too long: 210000 tokens > 200000 maximum", "... exceed context limit").
CONTEXT_TOO_LONG = re.compile(r"prompt is too long|context (limit|window)|too many tokens", re.I)
USAGE_FIELDS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}


# Context editing is a beta of the Messages API: a header to opt in, a body field the SDK's
# non-beta types do not declare (its beta client would change every type we read back).
CONTEXT_EDITING_BETA = "context-management-2025-06-27"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"


class AnthropicProvider:
    name = "anthropic"
    counts_tokens = True
    caches_prompts = True  # breakpoints we place (`_Request`), read at a tenth of the price
    clearing_capability: str | None = CLEAR_TOOL_USES

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 0,
        client: anthropic.Anthropic | None = None,
    ) -> None:
        # None falls through to the SDK's defaults (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL). No SDK
        # retries by default: the kernel decides and journals every attempt.
        self.client = client or anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries
        )

    def stream(
        self,
        conversation: Conversation,
        tools: list[ToolSpec],
        options: Options,
        *,
        abort: Watch | None = None,
    ) -> Iterator[Event]:
        request = _Request.of(conversation, tools, options)
        counts: dict[str, int] = {}  # the usage reported so far: what a cut answer cost
        try:
            yield from self._stream(request, options, counts, abort)
        except ProviderError as error:
            if counts and not isinstance(error, Aborted):
                error.spent = Usage(**counts)  # a failed answer's input is billed all the same
            raise

    def _stream(
        self, request: _Request, options: Options, counts: dict[str, int], abort: Watch | None
    ) -> Iterator[Event]:
        with (
            cuttable(abort, lambda: Usage(**counts)) as cut,
            _typed_errors(),
            self.client.messages.create(
                model=options.model,
                max_tokens=options.max_output_tokens,
                # No secret the product knows (a key a tool printed) leaves in a request.
                messages=scrubber.scrub_value(request.messages, opaque=scrubber.PROVIDER_OPAQUE),
                system=scrubber.scrub_value(request.system),
                tools=request.tools or anthropic.omit,
                thinking=request.thinking,
                output_config=request.output_config,
                timeout=options.timeout_seconds,
                stream=True,
                extra_headers=request.extra_headers,
                extra_body=request.extra_body,
            ) as events,
        ):
            cut.attach(events.response)
            yield from translate(events, counts)

    def count_tokens(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options
    ) -> int:
        """`POST /v1/messages/count_tokens` with exactly what `stream` would send (free)."""
        request = _Request.of(conversation, tools, options)
        with _typed_errors():
            counted = self.client.messages.count_tokens(
                model=options.model,
                # No secret the product knows (a key a tool printed) leaves in a request.
                messages=scrubber.scrub_value(request.messages, opaque=scrubber.PROVIDER_OPAQUE),
                system=scrubber.scrub_value(request.system),
                tools=request.tools or anthropic.omit,
                thinking=request.thinking,
                output_config=request.output_config,
                timeout=options.timeout_seconds,
                extra_headers=request.extra_headers,
                extra_body=request.extra_body,
            )
        return counted.input_tokens

    def user_message(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": text}]}

    def tool_results(self, results: list[ToolResult]) -> list[dict[str, Any]]:
        if not results:
            return []  # the API rejects a message with no content
        content = [
            {
                "type": "tool_result",
                "tool_use_id": result.call_id,
                "content": result.output,
                "is_error": result.is_error,
            }
            for result in results
        ]
        return [{"role": "user", "content": content}]


@dataclass(frozen=True)
class _Request:
    """A request but for the model's name and limits: the messages (with cache breakpoints
    after the last and where the previous turn's request ended), the frozen prefix (tools and
    system, with theirs), thinking and effort, and context editing. The same for a response and
    for its token count, so the count is of the request that will be sent."""

    messages: list[MessageParam]
    system: str | list[TextBlockParam] | anthropic.Omit
    tools: list[ToolParam]
    thinking: ThinkingConfigParam | anthropic.Omit
    output_config: OutputConfigParam | anthropic.Omit
    extra_headers: dict[str, str] | None
    extra_body: dict[str, Any] | None

    @classmethod
    def of(cls, conversation: Conversation, tools: list[ToolSpec], options: Options) -> _Request:
        if conversation.provider != AnthropicProvider.name:
            raise BadRequest(f"a {conversation.provider!r} thread cannot be sent to Anthropic")
        tool_params: list[ToolParam] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
            for tool in tools
        ]
        # Native items are opaque dicts by design (base.Conversation): the API validates.
        messages = cast(list[MessageParam], conversation.items)
        system: str | list[TextBlockParam] | anthropic.Omit = conversation.system or anthropic.omit
        if options.cache_prefix and options.purpose == "turn" and messages:
            # And one after the last message: the next turn reads the whole conversation so far
            # from the cache and pays full price only for what it appends (a one-off
            # compaction request would only pay the cache write).
            messages = [*messages[:-1], _with_breakpoint(messages[-1])]
            # And one where the previous turn's request ended (its last breakpoint, the message
            # before the latest answer): the API looks for an earlier entry only about 20 blocks
            # back from a breakpoint, and a turn of many parallel tool calls appends more, which
            # would miss the whole thread and write it again.
            answered = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
            if answered and answered[-1] > 0:
                previous = answered[-1] - 1
                messages[previous] = _with_breakpoint(messages[previous])
        if options.cache_prefix:
            # Breakpoints after the last tool and after the system prompt: tools + system are
            # frozen for the whole run (docs/design.md §12), so every turn after the first reads
            # them from the cache. The API rejects an empty text block, hence no system block
            # without text.
            if tool_params:
                tool_params[-1]["cache_control"] = {"type": "ephemeral"}
            if conversation.system:
                system = [
                    {
                        "type": "text",
                        "text": conversation.system,
                        "cache_control": {"type": "ephemeral"},
                    }
                ]
        # Adaptive thinking (docs/design.md §12): the model decides how much to think, steered by
        # `effort`; the fixed-budget mode is deprecated for current models.
        thinking: ThinkingConfigParam | anthropic.Omit = (
            {"type": "adaptive"} if options.thinking else anthropic.omit
        )
        # Effort lives in `output_config`; SDK 2.14 types it, so it goes through the typed
        # parameter rather than `extra_body`, and mypy checks the allowed values.
        output_config: OutputConfigParam | anthropic.Omit = (
            {"effort": options.effort} if options.effort else anthropic.omit
        )
        clearing = options.server_clearing
        if clearing is None:
            return cls(messages, system, tool_params, thinking, output_config, None, None)
        edit = {
            "type": CLEAR_TOOL_USES,
            "trigger": {"type": "input_tokens", "value": clearing.trigger_tokens},
            "keep": {"type": "tool_uses", "value": clearing.keep},
            "clear_at_least": {"type": "input_tokens", "value": clearing.clear_at_least_tokens},
        }
        return cls(
            messages,
            system,
            tool_params,
            thinking,
            output_config,
            {"anthropic-beta": CONTEXT_EDITING_BETA},
            {"context_management": {"edits": [edit]}},
        )


# Blocks the API refuses a breakpoint on (thinking), or cannot cache (an empty text).
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})


def _with_breakpoint(message: MessageParam) -> MessageParam:
    """A copy of `message` with a cache breakpoint on its last block; the thread itself is
    left as recorded (the breakpoint moves forward every turn, the content never changes)."""
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        return message
    last = dict(cast(dict[str, Any], content[-1]))
    if last.get("type") in _UNCACHEABLE or last.get("text") == "":
        return message
    last["cache_control"] = {"type": "ephemeral"}
    return cast(MessageParam, {**message, "content": [*content[:-1], last]})


@contextmanager
def _typed_errors() -> Iterator[None]:
    """The SDK's exceptions as our typed provider errors."""
    try:
        yield
    except anthropic.APIStatusError as error:
        raise status_error(error) from error
    except (anthropic.APIConnectionError, httpx2.TransportError) as error:
        # A refused connection, a timeout, or a peer that closed mid-body.
        raise StreamInterrupted(str(error)) from error
    except anthropic.CredentialsError as error:
        raise AuthenticationFailed(str(error)) from error


def translate(
    events: Iterable[RawMessageStreamEvent], counts: dict[str, int] | None = None
) -> Iterator[Event]:
    """Turn raw stream events into normalised ones, ending with one `Completed` at message_stop.

    Blocks are the dicts the server sent in `content_block_start` (only the keys it set), grown by
    their deltas, so they go back on the next turn unchanged. `counts` (the usage reported so
    far, by `Usage` field) is the caller's to read if the stream is cut.
    """
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, list[str]] = {}
    counts = {} if counts is None else counts
    stop_reason: str | None = None
    explanation: str | None = None
    cleared = {"cleared_tool_results": 0, "cleared_tokens": 0}
    for event in events:
        if event.type == "message_start":
            counts.update(usage_counts(event.message.usage.to_dict()))
        elif event.type == "content_block_start":
            blocks[event.index] = event.content_block.to_dict(mode="json")
        elif event.type == "content_block_delta":
            block, delta = blocks[event.index], event.delta
            if delta.type == "text_delta":
                block["text"] = block.get("text", "") + delta.text
                yield TextDelta(delta.text)
            elif delta.type == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.thinking
                yield ReasoningDelta(delta.thinking)
            elif delta.type == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.signature
            elif delta.type == "input_json_delta":
                partial_json.setdefault(event.index, []).append(delta.partial_json)
            elif delta.type == "citations_delta":
                citation = delta.citation.to_dict(mode="json")
                block["citations"] = [*(block.get("citations") or []), citation]
        elif event.type == "content_block_stop":
            block = blocks[event.index]
            if event.index in partial_json or block["type"] == "tool_use":
                # tool_use and server_tool_use stream their input as JSON text; a tool without
                # arguments streams none and keeps the `{}` of its start event.
                raw = "".join(partial_json.pop(event.index, [])) or json.dumps(
                    block.get("input", {})
                )
                arguments, error = parse_arguments(raw)
                # Sent back, `input` must be an object even when the model's JSON was not one.
                block["input"] = arguments if arguments is not None else {}
                if block["type"] == "tool_use":
                    yield ToolCall(
                        call_id=block["id"],
                        name=block["name"],
                        arguments=arguments,
                        raw_arguments=raw,
                        error=error,
                    )
        elif event.type == "message_delta":
            stop_reason = event.delta.stop_reason or stop_reason
            counts.update(usage_counts(event.usage.to_dict()))  # cumulative totals
            if event.delta.stop_details is not None:
                explanation = event.delta.stop_details.explanation
            # Context editing's report, a beta field the SDK keeps without declaring it.
            for edit in _applied_edits(event.to_dict().get("context_management")):
                cleared["cleared_tool_results"] += _count(edit.get("cleared_tool_uses"))
                cleared["cleared_tokens"] += _count(edit.get("cleared_input_tokens"))
        elif event.type == "message_stop":
            content = [blocks[index] for index in sorted(blocks)]
            mapped = STOP_REASONS.get(stop_reason or "", "other")
            refusal = None
            if mapped == "refusal":
                said = "".join(
                    block.get("text", "") for block in content if block["type"] == "text"
                )
                refusal = said or explanation or DEFAULT_REFUSAL
            yield Completed(
                stop_reason=mapped,
                usage=Usage(**counts),
                items=[{"role": "assistant", "content": content}],
                refusal=refusal,
                **cleared,
            )
            return
    # The body ended cleanly but early (cut on a chunk boundary): the response is partial.
    raise StreamInterrupted("the stream ended before message_stop")


def _applied_edits(report: object) -> list[dict[str, Any]]:
    """The tool-result clearings in a `context_management` report, whatever else it holds."""
    edits = report.get("applied_edits") if isinstance(report, dict) else None
    return [
        edit
        for edit in (edits if isinstance(edits, list) else [])
        if isinstance(edit, dict) and edit.get("type") == CLEAR_TOOL_USES
    ]


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def parse_arguments(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        return None, f"the arguments are not valid JSON: {error}"
    if not isinstance(value, dict):
        return None, f"the arguments are JSON {type(value).__name__}, not an object"
    return value, None


def usage_counts(usage: dict[str, object]) -> dict[str, int]:
    return {
        field: value
        for key, field in USAGE_FIELDS.items()
        if isinstance(value := usage.get(key), int)
    }


def status_error(error: anthropic.APIStatusError) -> ProviderError:
    """Map an HTTP error, or an `event: error` sent mid-stream (HTTP status 200), to our errors.

    The body's `error.type` comes first: it is the only signal a mid-stream error carries.
    """
    message = error.api_message or str(error)
    kind, status = error.type, error.status_code
    retry_after = retry_after_seconds(error.response.headers)
    if kind == "rate_limit_error" or status == 429:
        return RateLimited(message, retry_after=retry_after)
    if kind == "overloaded_error" or status == 529:
        return Overloaded(message, retry_after=retry_after)
    if kind in ("authentication_error", "permission_error") or status in (401, 403):
        return AuthenticationFailed(message)
    if kind == "not_found_error" or status == 404:
        # /v1/messages has one thing to miss: the model ("model: claude-nope").
        return UnknownModel(message) if "model" in message.lower() else BadRequest(message)
    if kind == "invalid_request_error" or status in (400, 413, 422):
        if status == 413 or CONTEXT_TOO_LONG.search(message):
            return ContextTooLong(message)
        return BadRequest(message)
    if status >= 500 or status < 400 or status == 408 or kind in ("api_error", "timeout_error"):
        # The server's trouble (mid-stream errors included): worth another attempt.
        return ServerError(message, retry_after=retry_after)
    return BadRequest(message)  # billing, conflicts...: the same request would fail the same way


def retry_after_seconds(headers: httpx2.Headers) -> float | None:
    # Anthropic sends whole seconds; an HTTP-date form is not used by the API and is ignored.
    try:
        return float(headers["retry-after"])
    except (KeyError, ValueError):
        return None
