"""Each adapter's answer cut short from another thread: the connection is closed at once and
the stream raises `Aborted` with the usage reported so far, never a `Completed`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kernel.steps import Stopping
from missions.providers.anthropic import AnthropicProvider
from missions.providers.base import Aborted, Conversation, Event, Options, Provider, Usage
from missions.providers.compatible import CompatibleProvider
from missions.providers.openai import OpenAIProvider
from tests.missions.test_stop_streaming import PROVIDERS
from tests.polling import wait_for
from tests.providers.wire import WireServer

ADAPTERS: dict[str, Callable[[WireServer], Provider]] = {
    "anthropic": lambda server: AnthropicProvider(api_key="test-key", base_url=server.url),
    "openai": lambda server: OpenAIProvider(api_key="test-key", base_url=server.url + "/v1"),
    "compatible": lambda server: CompatibleProvider(base_url=server.url + "/v1"),
}
# What each had reported when cut: Anthropic the input (and a first output token) at the start.
KNOWN = {
    "anthropic": Usage(input_tokens=12, output_tokens=1),
    "openai": Usage(),
    "compatible": Usage(),
}


def read(provider: Provider, stopping: Stopping, name: str) -> tuple[list[Event], list[Any]]:
    """Read an answer under `stopping` in this thread: (events, [the error it raised])."""
    seen: list[Event] = []
    raised: list[Any] = []
    thread = Conversation(provider=provider.name, system="", items=[provider.user_message("Hi")])
    try:
        for event in provider.stream(
            thread,
            [],
            Options(model=PROVIDERS[name].model),
            abort=lambda cut: stopping.cutting(cut),
        ):
            seen.append(event)
    except Aborted as error:
        raised.append(error)
    return seen, raised


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_it_closes_the_connection_and_raises_aborted_mid_answer(
    server: WireServer, name: str
) -> None:
    server.trickling.clear()
    server.disconnects.clear()
    server.queue(PROVIDERS[name].slow())
    stopping = Stopping()
    outcome: list[tuple[list[Event], list[Any]]] = []
    reader = threading.Thread(
        target=lambda: outcome.append(read(ADAPTERS[name](server), stopping, name))
    )
    reader.start()
    assert server.trickling.wait(10)

    cut = time.monotonic()
    stopping.set()
    reader.join(timeout=5)

    assert not reader.is_alive(), "the read went on after the cut"
    wait_for(
        lambda: server.disconnects,
        timeout=2,
        message="the server to see the connection closed",
        interval=0.01,
    )
    assert server.disconnects[0] - cut < 0.5
    seen, raised = outcome[0]
    assert [type(error) for error in raised] == [Aborted]
    assert raised[0].usage == KNOWN[name]
    assert seen  # it had begun: deltas came before the cut
    assert not [event for event in seen if type(event).__name__ == "Completed"]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_a_cut_before_the_answer_starts_ends_it_as_soon_as_it_does(
    server: WireServer, name: str
) -> None:
    server.trickling.clear()
    server.disconnects.clear()
    server.queue(PROVIDERS[name].slow())
    stopping = Stopping()
    stopping.set()  # the run is stopping already when the step asks

    started = time.monotonic()
    seen, raised = read(ADAPTERS[name](server), stopping, name)

    assert time.monotonic() - started < 2
    assert [type(error) for error in raised] == [Aborted]
    assert not [event for event in seen if type(event).__name__ == "Completed"]
    assert len(server.received) == 1
