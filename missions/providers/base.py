"""The one interface every model provider speaks: `stream(conversation, tools, options)`.

An adapter turns its provider's stream into the normalised events below, and keeps the
conversation in the provider's **native** format: what the model produced (Anthropic thinking
blocks with their signatures, OpenAI encrypted reasoning items) is appended back unchanged, and a
thread is never converted from one provider to another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# --- What goes in -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class Conversation:
    """A thread in one provider's native format.

    `items` are the provider's own message/item dicts (Anthropic `messages`, OpenAI Responses
    `input` items), appended to only: the frozen prefix (`system`, tools) never changes mid-run.
    """

    provider: str
    system: str
    items: list[dict[str, Any]] = field(default_factory=list)
    # The number of the turn being asked for, compacted turns included (the loop keeps it; the
    # scripted provider plays its script by it).
    turn: int = 1


Effort = Literal["low", "medium", "high"]


@dataclass(frozen=True)
class ServerClearing:
    """Old tool results cleared by the provider itself, on its side, before the model reads the
    request (Anthropic's context editing): the thread we keep and send stays whole.

    Past `trigger_tokens` of input, the oldest results are replaced by a placeholder, all but
    the latest `keep`, and at least `clear_at_least_tokens` at a time (each clearing rewrites
    the cached prompt from that point, so it must be worth it)."""

    trigger_tokens: int
    keep: int
    clear_at_least_tokens: int


@dataclass(frozen=True)
class Options:
    model: str
    max_output_tokens: int = 8192
    effort: Effort | None = None
    thinking: bool = False  # Anthropic extended thinking / OpenAI reasoning summaries
    cache_prefix: bool = True  # Anthropic prompt-cache breakpoints on tools + system
    timeout_seconds: float = 600.0
    purpose: Literal["turn", "compaction"] = "turn"
    # Only for a model whose catalog entry says it supports it (see `missions.engine.loop`).
    server_clearing: ServerClearing | None = None
    # One per thread: OpenAI sends requests with the same key to the same prompt cache
    # (`prompt_cache_key`); Anthropic caches by its breakpoints and needs none.
    cache_key: str | None = None


# --- What comes out -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """A summary of the model's reasoning (never the hidden reasoning itself)."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """A complete tool call. `arguments` is None when the model sent malformed JSON; the raw
    text and the parse error are kept so the loop can answer the model precisely."""

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str
    error: str | None = None


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "pause", "other"]


@dataclass(frozen=True)
class Completed:
    """The end of one response: why it stopped, what it cost, and the native items to append to
    the conversation exactly as received."""

    stop_reason: StopReason
    usage: Usage
    items: list[dict[str, Any]]
    refusal: str | None = None
    # What the provider cleared on its side before the model read this request (`ServerClearing`).
    cleared_tool_results: int = 0
    cleared_tokens: int = 0


Event = TextDelta | ReasoningDelta | ToolCall | Completed


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    output: str
    is_error: bool = False


# --- Errors -------------------------------------------------------------------------------------


class ProviderError(Exception):
    """A provider failure. `permanent` errors are not retried; others may be, after
    `retry_after` seconds when the provider said so."""

    permanent = False
    code = "provider_error"
    # What the provider had reported of the failed request's usage when it failed (Anthropic
    # reports the input at the start of a stream): billed all the same, so counted.
    spent: Usage | None = None

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class RateLimited(ProviderError):
    code = "rate_limited"


class Overloaded(ProviderError):
    code = "overloaded"


class ServerError(ProviderError):
    code = "server_error"


class StreamInterrupted(ProviderError):
    """The connection dropped mid-stream: nothing of the partial response is kept."""

    code = "stream_interrupted"


class Aborted(ProviderError):
    """The answer was cut short on purpose (its run is stopping, or the owner interrupted it):
    never retried. `usage` is what the provider had reported of it when it was cut (Anthropic
    reports the input at the start of a stream; OpenAI and compatible servers only at its end,
    so nothing)."""

    permanent = True
    code = "aborted"

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage()


class AuthenticationFailed(ProviderError):
    permanent = True
    code = "authentication_failed"


class UnknownModel(ProviderError):
    permanent = True
    code = "unknown_model"


class BadRequest(ProviderError):
    permanent = True
    code = "bad_request"


class ContextTooLong(ProviderError):
    permanent = True
    code = "context_too_long"


# --- The interface ------------------------------------------------------------------------------

# How a caller cuts an answer short: `stream` registers its cut (which closes the response's
# connection, from whatever thread calls it) for as long as it reads, with `with abort(cut):`.
# The run's stop signal is one (`kernel.steps.Stopping.cutting`).
Watch = Callable[[Callable[[], None]], AbstractContextManager[None]]


class Provider(Protocol):
    """A model provider. Implementations: `anthropic`, `openai`, `scripted` (offline)."""

    name: str
    # Whether `count_tokens` asks the provider's counting endpoint (else it is an estimate).
    counts_tokens: bool
    # Whether the provider keeps a prompt cache that a request sharing an earlier one's prefix
    # reads from at a fraction of the input price (the window keeps the thread unchanged then).
    caches_prompts: bool
    # The model-listing capability saying a model can have old tool results cleared on the
    # provider's side (the adapter then honours `Options.server_clearing`); None: not offered.
    clearing_capability: str | None

    def stream(
        self,
        conversation: Conversation,
        tools: list[ToolSpec],
        options: Options,
        *,
        abort: Watch | None = None,
    ) -> Iterator[Event]:
        """Send the conversation; yield deltas and tool calls, then exactly one `Completed`.

        Raises a `ProviderError` subclass; never yields a `Completed` for a partial response.
        Cut through `abort`, the connection is closed at once and it raises `Aborted`.
        """
        ...

    def count_tokens(
        self, conversation: Conversation, tools: list[ToolSpec], options: Options
    ) -> int:
        """The input tokens this request would weigh, counted by the provider's own counting
        endpoint (nothing is generated, nothing billed) where `counts_tokens`.

        Raises a `ProviderError` subclass like `stream`.
        """
        ...

    def user_message(self, text: str) -> dict[str, Any]:
        """A native item carrying the owner's (or the harness's) text."""
        ...

    def tool_results(self, results: list[ToolResult]) -> list[dict[str, Any]]:
        """Native items answering the tool calls of the last response."""
        ...
