"""Local servers that speak Anthropic's Messages API and OpenAI's Responses API and report
prompt-cache usage the way the providers do, deterministically: the prompt-cache benchmark
(`cache_bench`) and the engine's tests drive the real SDKs, through the real adapters, against them.

Tokens: a deterministic stand-in for a tokenizer, 4 bytes of UTF-8 a token (rounded up) over
the canonical serialisation of each part of the prompt (JSON with sorted keys and no spaces, the
`cache_control` markers left out: they say where to cache, they are not prompt).

Anthropic (prompt caching as documented): the prompt is a sequence of blocks, tools first, then
the system blocks, then each message's content blocks. A block with `cache_control` is a
breakpoint (at most 4). At each breakpoint the server looks for an earlier cache entry at that
block and up to `LOOKBACK` blocks before it; the longest found is read (`cache_read_input_tokens`)
and its lifetime renewed. Every breakpoint past it whose prefix weighs at least `MIN_CACHEABLE`
tokens is written, for `TTL_SECONDS` (`cache_creation_input_tokens`: from the end of the read to
the last breakpoint written). `input_tokens` is the rest: what comes after. An entry is the exact
prefix: the model and every block up to it; a change anywhere before a breakpoint misses it.

OpenAI (automatic prefix caching): a prompt of at least `MIN_CACHEABLE` tokens is cached as a
whole; a later one reads the longest prefix it shares with an earlier one of the same model,
counted in `OPENAI_INCREMENT`-token steps past the first `MIN_CACHEABLE`
(`input_tokens_details.cached_tokens`, included in `input_tokens`). The prompt is the tools,
then the instructions, then the input items.

Answers come from a `Script`: given the request (and how many model requests the server has
answered), a text and at most one tool call. Token-counting requests (`/v1/messages/count_tokens`,
`/v1/responses/input_tokens`) answer the same count and touch no cache.
"""

from __future__ import annotations

import abc
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BYTES_PER_TOKEN = 4
MIN_CACHEABLE = 1024  # tokens: shorter prefixes are not cached (both providers)
TTL_SECONDS = 300.0  # a cache entry lives 5 minutes after it was last written or read
LOOKBACK = 20  # blocks before a breakpoint where Anthropic still finds an earlier entry
MAX_BREAKPOINTS = 4
OPENAI_INCREMENT = 128  # tokens: OpenAI's cache hits grow by this much past the first 1024

Clock = Callable[[], float]


def tokens(text: str) -> int:
    """The tokens of `text` (4 bytes of UTF-8 each, the last one partial)."""
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


def canonical(value: Any) -> str:
    """The serialisation a part of a prompt is counted and compared by, its cache markers out."""
    return json.dumps(_unmarked(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _unmarked(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    return value


# --- What the model answers -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    text: str
    call: Call | None = None


# (the request's body, how many model requests were answered before it) -> the answer.
Script = Callable[[dict[str, Any], int], Reply]


def always(text: str) -> Script:
    return lambda body, answered: Reply(text)


# --- The usage a request was billed -----------------------------------------------------------


@dataclass(frozen=True)
class Billed:
    """One model request's usage as the server reported it, in disjoint buckets."""

    path: str
    uncached: int
    cache_read: int
    cache_write: int
    output: int

    @property
    def prompt(self) -> int:
        return self.uncached + self.cache_read + self.cache_write


# --- The cache accounting, apart from HTTP --------------------------------------------------------


@dataclass
class AnthropicCache:
    """Anthropic's prompt cache: entries by exact prefix, written at breakpoints."""

    clock: Clock = time.monotonic
    entries: dict[str, float] = field(default_factory=dict)  # prefix hash -> expiry

    def bill(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input_tokens, cache_read_input_tokens, cache_creation_input_tokens) of a request,
        the cache updated as the provider would. Raises ValueError on too many breakpoints."""
        blocks = anthropic_blocks(body)
        marks = [index for index, (_, marked) in enumerate(blocks) if marked]
        if len(marks) > MAX_BREAKPOINTS:
            raise ValueError(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided."
                f" Found {len(marks)}."
            )
        hashes, sizes = _chain(str(body.get("model", "")), [text for text, _ in blocks])
        total = sizes[-1] if sizes else 0
        now = self.clock()
        read_at = -1
        for mark in marks:
            for index in range(mark, max(mark - LOOKBACK, 0) - 1, -1):
                if index > read_at and self.entries.get(hashes[index], -1.0) > now:
                    read_at = index
                    break
        read = sizes[read_at] if read_at >= 0 else 0
        if read_at >= 0:
            self.entries[hashes[read_at]] = now + TTL_SECONDS
        written_to = read
        for mark in marks:
            if mark > read_at and sizes[mark] >= MIN_CACHEABLE:
                self.entries[hashes[mark]] = now + TTL_SECONDS
                written_to = sizes[mark]
        return total - written_to, read, written_to - read

    def count(self, body: dict[str, Any]) -> int:
        return sum(tokens(text) for text, _ in anthropic_blocks(body))


def anthropic_blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The prompt of a Messages request as (canonical block, is a breakpoint), in the order the
    cache reads it: tools, system, messages."""
    found: list[tuple[str, bool]] = []

    def add(block: Any, extra: dict[str, Any] | None = None) -> None:
        marked = isinstance(block, dict) and "cache_control" in block
        found.append((canonical({**(extra or {}), "block": block}), marked))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    if isinstance(system, str) and system:
        add({"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add(block)
    for message in body.get("messages") or []:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in parts or []:
            add(block, {"role": message.get("role")})
    return found


def _chain(model: str, texts: list[str]) -> tuple[list[str], list[int]]:
    """Each block's prefix hash (model included: caches are per model) and cumulative tokens."""
    hashes: list[str] = []
    sizes: list[int] = []
    digest, size = hashlib.sha256(model.encode()).hexdigest(), 0
    for text in texts:
        digest = hashlib.sha256(f"{digest}\n{text}".encode()).hexdigest()
        size += tokens(text)
        hashes.append(digest)
        sizes.append(size)
    return hashes, sizes


@dataclass
class OpenAICache:
    """OpenAI's automatic prompt cache: the longest shared prefix with an earlier prompt."""

    clock: Clock = time.monotonic
    prompts: list[tuple[str, bytes, float]] = field(default_factory=list)  # model, bytes, expiry

    def bill(self, body: dict[str, Any]) -> tuple[int, int]:
        """(input_tokens, cached_tokens) of a request, cached ones included in the first."""
        model, prompt = str(body.get("model", "")), openai_prompt(body)
        total = -(-len(prompt) // BYTES_PER_TOKEN)
        now = self.clock()
        shared = 0
        for index, (other_model, other, expiry) in enumerate(self.prompts):
            if other_model != model or expiry <= now:
                continue
            common = _common_prefix(prompt, other) // BYTES_PER_TOKEN
            if common >= MIN_CACHEABLE:
                self.prompts[index] = (other_model, other, now + TTL_SECONDS)  # a hit renews it
            shared = max(shared, common)
        cached = 0
        if shared >= MIN_CACHEABLE and total >= MIN_CACHEABLE:
            cached = MIN_CACHEABLE + (shared - MIN_CACHEABLE) // OPENAI_INCREMENT * OPENAI_INCREMENT
        if total >= MIN_CACHEABLE:
            self.prompts.append((model, prompt, now + TTL_SECONDS))
        return total, cached

    def count(self, body: dict[str, Any]) -> int:
        return -(-len(openai_prompt(body)) // BYTES_PER_TOKEN)


def openai_prompt(body: dict[str, Any]) -> bytes:
    """A Responses request's prompt as compared byte by byte: tools, instructions, input."""
    parts = [canonical(body.get("tools") or []), canonical(body.get("instructions") or "")]
    items = body.get("input")
    for item in [items] if isinstance(items, str) else items or []:
        parts.append(canonical(item))
    return "\n".join(parts).encode()


def _common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix, by bisection (slices compare in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


# --- The servers --------------------------------------------------------------------------------


class CacheServer(abc.ABC):
    """A threaded HTTP server on 127.0.0.1; `billed` lists every model request's usage. Each
    provider's server says how it answers (`answer`)."""

    def __init__(self, script: Script, clock: Clock = time.monotonic) -> None:
        self.script = script
        self.clock = clock
        self.billed: list[Billed] = []
        self.bodies: list[dict[str, Any]] = []  # every model request, as sent
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @abc.abstractmethod
    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
        """(status, content type, body) for a POST to `path`."""

    def _reply(self, body: dict[str, Any]) -> Reply:
        self.bodies.append(body)
        return self.script(body, len(self.bodies) - 1)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a benchmark's output is its figures

            def do_POST(self) -> None:  # the stdlib's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with server._lock:  # one request at a time: the cache is a sequence of events
                    try:
                        status, kind, data = server.answer(self.path.split("?")[0], json.loads(raw))
                    except ValueError as error:
                        status, kind = 400, "application/json"
                        data = json.dumps(
                            {
                                "type": "error",
                                "error": {"type": "invalid_request_error", "message": str(error)},
                            }
                        ).encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _json(value: dict[str, Any]) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps(value).encode()


class AnthropicServer(CacheServer):
    """`POST /v1/messages` (streamed) and `/v1/messages/count_tokens`."""

    def __init__(self, script: Script, clock: Clock = time.monotonic) -> None:
        super().__init__(script, clock)
        self.cache = AnthropicCache(clock)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
        if path == "/v1/messages/count_tokens":
            return _json({"input_tokens": self.cache.count(body)})
        if path != "/v1/messages":
            return 404, "application/json", b'{"type":"error","error":{"type":"not_found_error"}}'
        uncached, read, written = self.cache.bill(body)
        reply = self._reply(body)
        number = len(self.bodies)
        content: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if reply.text:
            content.append(
                ({"type": "text", "text": ""}, [{"type": "text_delta", "text": reply.text}])
            )
        if reply.call is not None:
            arguments = json.dumps(reply.call.arguments)
            start = {"type": "tool_use", "id": f"toolu_{number:04d}", "name": reply.call.name}
            content.append(
                ({**start, "input": {}}, [{"type": "input_json_delta", "partial_json": arguments}])
            )
        output = tokens(reply.text) + (tokens(arguments) if reply.call else 0)
        self.billed.append(Billed("/v1/messages", uncached, read, written, output))
        usage = {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
            "output_tokens": 1,
        }
        message: dict[str, Any] = {
            "id": f"msg_{number:04d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": message})
        ]
        for index, (start_block, deltas) in enumerate(content):
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start_block},
                )
            )
            events += [
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                for d in deltas
            ]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        stop = "tool_use" if reply.call else "end_turn"
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": output},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return 200, "text/event-stream", _sse(events)


class OpenAIServer(CacheServer):
    """`POST /v1/responses` (streamed) and `/v1/responses/input_tokens`."""

    def __init__(self, script: Script, clock: Clock = time.monotonic) -> None:
        super().__init__(script, clock)
        self.cache = OpenAICache(clock)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
        if path == "/v1/responses/input_tokens":
            return _json(
                {"object": "response.input_tokens", "input_tokens": self.cache.count(body)}
            )
        if path != "/v1/responses":
            return 404, "application/json", b'{"error":{"message":"not found","code":null}}'
        total, cached = self.cache.bill(body)
        reply = self._reply(body)
        number = len(self.bodies)
        output: list[dict[str, Any]] = []
        if reply.text:
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": reply.text}
            output.append(
                {
                    "id": f"msg_{number:04d}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [part],
                }
            )
        written = tokens(reply.text)
        if reply.call is not None:
            arguments = json.dumps(reply.call.arguments)
            written += tokens(arguments)
            output.append(
                {
                    "id": f"fc_{number:04d}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": f"call_{number:04d}",
                    "name": reply.call.name,
                    "arguments": arguments,
                }
            )
        self.billed.append(Billed("/v1/responses", total - cached, cached, 0, written))
        usage = {
            "input_tokens": total,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": written,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": total + written,
        }
        sequence = iter(range(1_000_000))

        def event(name: str, **data: Any) -> tuple[str, dict[str, Any]]:
            return name, {"type": name, **data, "sequence_number": next(sequence)}

        events = [event("response.created", response=_response(body, number, "in_progress", []))]
        for index, item in enumerate(output):
            events.append(event("response.output_item.done", output_index=index, item=item))
        events.append(
            event(
                "response.completed", response=_response(body, number, "completed", output, usage)
            )
        )
        return 200, "text/event-stream", _sse(events)


def _response(
    body: dict[str, Any],
    number: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": f"resp_{number:04d}",
        "object": "response",
        "created_at": 1767225600,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        "metadata": {},
    }


@contextmanager
def serving(server: CacheServer) -> Iterator[CacheServer]:
    """`server` answering on its port for the block."""
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
