"""The prompt-cache wire servers (`missions.proving.cache_wire`) bill the cache as the providers
document it: their accounting on its own, with a clock the test moves, then through the real
SDKs and adapters, Anthropic's breakpoints included."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from missions.providers.anthropic import AnthropicProvider
from missions.providers.base import (
    BadRequest,
    Completed,
    Conversation,
    Options,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from missions.providers.openai import OpenAIProvider
from missions.proving import cache_wire
from missions.proving.cache_wire import AnthropicCache, Call, OpenAICache, Reply

LONG = "You read service logs and report what changed between two warnings. " * 80  # ~1,360
TOOL = {"name": "noop", "description": "Does nothing.", "input_schema": {"type": "object"}}
EPHEMERAL = {"type": "ephemeral"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def text(value: str, *, mark: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    return {**block, "cache_control": EPHEMERAL} if mark else block


def messages_body(system: str, *messages: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as our adapter sends one: breakpoints after the tools, the system
    prompt, and the last message."""
    return {
        "model": "claude-test",
        "tools": [{**TOOL, "cache_control": EPHEMERAL}],
        "system": [text(system, mark=True)],
        "messages": list(messages),
    }


def user(value: str, *, mark: bool = True) -> dict[str, Any]:
    return {"role": "user", "content": [text(value, mark=mark)]}


def answer(value: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [text(value)]}


# --- Anthropic's accounting ---------------------------------------------------------------------


def test_it_reads_the_prefix_an_earlier_request_wrote_and_writes_what_follows() -> None:
    cache = AnthropicCache(Clock())
    first = messages_body(LONG, user("Read the log."))
    second = messages_body(LONG, user("Read the log.", mark=False), answer("Part 1."), user("Go."))

    uncached, read, written = cache.bill(first)
    assert (uncached, read) == (0, 0)  # the last breakpoint ends the prompt
    assert written == cache.count(first) > cache_wire.MIN_CACHEABLE

    assert cache.bill(second) == (0, written, cache.count(second) - written)


def test_it_misses_everything_after_a_change_early_in_the_prompt() -> None:
    cache = AnthropicCache(Clock())
    cache.bill(messages_body(LONG, user("Read the log.")))

    # A timestamp in the system prompt: nothing after it can be read.
    changed = messages_body("Now: 12:01. " + LONG, user("Read the log."))
    assert cache.bill(changed) == (0, 0, cache.count(changed))
    # A change in the first message: the tools and the system prompt are still read.
    later = messages_body(LONG, user("Read the other log."))
    uncached, read, written = cache.bill(later)
    assert read == cache.count(messages_body(LONG))
    assert (uncached, written) == (0, cache.count(later) - read)


def test_it_caches_no_prefix_under_the_minimum() -> None:
    cache = AnthropicCache(Clock())
    short = messages_body("You are terse.", user("Hi."))

    assert cache.bill(short) == (cache.count(short), 0, 0)
    assert cache.bill(short) == (cache.count(short), 0, 0)  # nothing was written to read
    assert cache.count(short) < cache_wire.MIN_CACHEABLE


def test_it_counts_what_follows_the_last_breakpoint_as_uncached_input() -> None:
    cache = AnthropicCache(Clock())
    body = messages_body(LONG, user("Read the log.", mark=False))

    uncached, read, written = cache.bill(body)

    assert read == 0
    assert written == cache.count(messages_body(LONG))  # up to the system breakpoint
    assert uncached == cache.count(body) - written > 0


def test_it_looks_back_only_twenty_blocks_from_a_breakpoint() -> None:
    cache = AnthropicCache(Clock())
    opening = user("Read the log.")
    cache.bill(messages_body(LONG, opening))
    unmarked = user("Read the log.", mark=False)
    wide = {"role": "assistant", "content": [text(f"Part {n}.") for n in range(25)]}

    # 26 blocks appended: the entry where the last request ended is out of reach.
    missed = messages_body(LONG, unmarked, wide, user("Go on."))
    assert cache.bill(missed)[1] == cache.count(messages_body(LONG))
    # A breakpoint where it ended reads it again.
    cache = AnthropicCache(Clock())
    cache.bill(messages_body(LONG, opening))
    kept = messages_body(LONG, opening, wide, user("Go on."))
    assert cache.bill(kept)[1] == cache.count(messages_body(LONG, opening))


def test_it_forgets_an_entry_five_minutes_after_it_was_last_used() -> None:
    clock = Clock()
    cache = AnthropicCache(clock)
    body = messages_body(LONG, user("Read the log."))
    cache.bill(body)

    clock.now += 299
    assert cache.bill(body)[1] == cache.count(body)  # read, and so kept 5 more minutes
    clock.now += 299
    assert cache.bill(body)[1] == cache.count(body)
    clock.now += 301
    assert cache.bill(body) == (0, 0, cache.count(body))


def test_it_refuses_more_than_four_breakpoints() -> None:
    body = messages_body(LONG, *(user(f"Message {n}.") for n in range(3)))

    with pytest.raises(ValueError, match="A maximum of 4 blocks with cache_control"):
        AnthropicCache(Clock()).bill(body)


# --- OpenAI's accounting --------------------------------------------------------------------------


def responses_body(instructions: str, *items: str) -> dict[str, Any]:
    return {
        "model": "gpt-test",
        "instructions": instructions,
        "tools": [{"type": "function", "name": "noop", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": item}]} for item in items
        ],
    }


def test_it_reads_the_longest_prefix_shared_with_an_earlier_prompt_in_steps_of_128() -> None:
    cache = OpenAICache(Clock())
    first = responses_body(LONG, "Read the log.")
    second = responses_body(LONG, "Read the log.", "Part 1 " * 200)

    assert cache.bill(first) == (cache.count(first), 0)
    total, cached = cache.bill(second)

    shared = len(cache_wire.openai_prompt(first)) // cache_wire.BYTES_PER_TOKEN  # at least
    assert total == cache.count(second)
    assert cached >= cache_wire.MIN_CACHEABLE
    assert (cached - cache_wire.MIN_CACHEABLE) % cache_wire.OPENAI_INCREMENT == 0
    assert shared - cache_wire.OPENAI_INCREMENT < cached <= shared + 1


def test_it_reads_nothing_after_a_change_early_in_an_openai_prompt() -> None:
    cache = OpenAICache(Clock())
    cache.bill(responses_body(LONG, "Read the log."))

    changed = responses_body("Now: 12:01. " + LONG, "Read the log.")
    assert cache.bill(changed) == (cache.count(changed), 0)


def test_it_caches_no_openai_prompt_under_the_minimum() -> None:
    cache = OpenAICache(Clock())
    short = responses_body("You are terse.", "Hi.")

    cache.bill(short)
    assert cache.bill(short) == (cache.count(short), 0)


# --- Through the real SDKs ----------------------------------------------------------------------


def calling(body: dict[str, Any], answered: int) -> Reply:
    return Reply("Reading.", Call("noop", {"note": str(answered)}))


@pytest.fixture
def anthropic_server() -> Iterator[cache_wire.CacheServer]:
    with cache_wire.serving(cache_wire.AnthropicServer(calling)) as server:
        yield server


@pytest.fixture
def openai_server() -> Iterator[cache_wire.CacheServer]:
    with cache_wire.serving(cache_wire.OpenAIServer(calling)) as server:
        yield server


SPEC = ToolSpec("noop", "Does nothing.", {"type": "object"})
OPTIONS = Options(model="claude-test", cache_key="agentos-run-1")


def turn(provider: AnthropicProvider | OpenAIProvider, thread: Conversation) -> Usage:
    """One turn: the answer and its tool calls' results appended, as the loop does."""
    events = list(provider.stream(thread, [SPEC], OPTIONS))
    done = events[-1]
    assert isinstance(done, Completed)
    thread.items.extend(done.items)
    calls = [event for event in events if isinstance(event, ToolCall)]
    results = [ToolResult(call.call_id, "ok " * 100) for call in calls]
    thread.items.extend(provider.tool_results(results))
    return done.usage


def test_the_anthropic_adapter_reads_the_thread_from_the_cache_each_turn(
    anthropic_server: cache_wire.CacheServer,
) -> None:
    provider = AnthropicProvider(api_key="sk-ant-test", base_url=anthropic_server.url)
    thread = Conversation("anthropic", LONG, [provider.user_message("Read the log.")])

    first, second, third = (turn(provider, thread) for _ in range(3))

    assert (first.input_tokens, first.cache_read_tokens) == (0, 0)
    assert second.cache_read_tokens == first.cache_write_tokens > cache_wire.MIN_CACHEABLE
    assert third.cache_read_tokens == second.cache_read_tokens + second.cache_write_tokens
    billed = anthropic_server.billed
    assert [(b.uncached, b.cache_read, b.cache_write) for b in billed] == [
        (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) for u in (first, second, third)
    ]
    assert provider.count_tokens(thread, [SPEC], OPTIONS) > billed[-1].prompt


def test_the_anthropic_adapter_still_reads_the_thread_after_a_turn_of_many_parallel_calls(
    anthropic_server: cache_wire.CacheServer,
) -> None:
    """12 calls and their results append 24 blocks: past the API's 20-block lookback from the
    last breakpoint. The breakpoint where the previous request ended keeps the thread read."""
    provider = AnthropicProvider(api_key="sk-ant-test", base_url=anthropic_server.url)
    thread = Conversation("anthropic", LONG, [provider.user_message("Read the log.")])
    first = turn(provider, thread)
    thread.items = thread.items[:1]  # its answer is replaced by a wide one
    calls = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": "noop", "input": {"note": str(n)}}
        for n in range(12)
    ]
    thread.items.append({"role": "assistant", "content": calls})
    thread.items.extend(
        provider.tool_results([ToolResult(f"toolu_{n}", f"ok {n}") for n in range(12)])
    )

    wide = turn(provider, thread)

    assert wide.cache_read_tokens == first.cache_write_tokens  # the whole earlier request


def test_the_openai_adapter_reports_cached_tokens_apart_from_the_rest(
    openai_server: cache_wire.CacheServer,
) -> None:
    provider = OpenAIProvider(api_key="sk-openai-test", base_url=openai_server.url + "/v1")
    thread = Conversation("openai", LONG, [provider.user_message("Read the log.")])

    first, second = turn(provider, thread), turn(provider, thread)

    assert first.cache_read_tokens == 0
    assert second.cache_read_tokens >= cache_wire.MIN_CACHEABLE
    # The adapter takes cached tokens out of the input (disjoint buckets); the server billed both.
    assert second.input_tokens + second.cache_read_tokens == openai_server.billed[1].prompt
    assert openai_server.billed[1].cache_read == second.cache_read_tokens
    assert provider.count_tokens(thread, [SPEC], OPTIONS) > openai_server.billed[1].prompt


def test_it_answers_a_request_with_too_many_breakpoints_as_the_api_does(
    anthropic_server: cache_wire.CacheServer,
) -> None:
    provider = AnthropicProvider(api_key="sk-ant-test", base_url=anthropic_server.url)
    items = [{"role": "user", "content": [text(f"Message {n}.", mark=True)]} for n in range(3)]
    thread = Conversation("anthropic", LONG, copy.deepcopy(items))

    with pytest.raises(BadRequest, match="A maximum of 4 blocks"):
        list(provider.stream(thread, [SPEC], OPTIONS))
