"""Model output streams to open consoles as deltas while the step runs (ephemeral)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer

from kernel import runs
from kernel.bus import OWNER_GROUP
from kernel.models import Run, RunStatus, Step
from kernel.worker import Worker
from missions.engine import deltas
from tests.kernel.factories import make_mission
from tests.stream.test_websocket import open_socket, owner_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _inline_sender(seeded_catalog: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Send on the calling thread: run through `sync_to_async`, the in-memory layer's sends
    then go to the test's own event loop (it is not thread-safe). One test keeps the thread."""
    monkeypatch.setattr(deltas, "submit", lambda send, messages: send(messages))
    deltas.forget_presence()


def scripted_run(turns: list[dict[str, Any]]) -> Run:
    return runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Say something.",
            "provider": "scripted",
            "model": "scripted",
            "tools": [],
            "script": {"turns": turns},
        },
    )


def work() -> None:
    Worker(lease_seconds=30).run_until_idle()


def model_step(run: Run) -> Step:
    return Step.objects.get(run=run, kind="model_call")


async def receive_deltas(socket: Any, count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while len(found) < count:
        message = await socket.receive_json_from(timeout=10)
        if message["type"] == "delta":
            found.append(message)
    return found


async def test_it_forwards_a_model_steps_text_and_reasoning_to_the_console() -> None:
    client = await sync_to_async(owner_client)()
    socket = await open_socket(client)
    run = await sync_to_async(scripted_run)([{"reasoning": "Think first.", "text": "Hello."}])

    await sync_to_async(work, thread_sensitive=False)()
    received = await receive_deltas(socket, 2)
    await socket.disconnect()

    step = await sync_to_async(model_step)(run)
    assert isinstance(step.result, dict)
    assert received == [
        {
            "type": "delta",
            "run": run.pk,
            "seq": step.seq,
            "channel": "reasoning",
            "offset": 0,
            "text": "Think first.",
        },
        {
            "type": "delta",
            "run": run.pk,
            "seq": step.seq,
            "channel": "text",
            "offset": 0,
            "text": step.result["text"],
        },
    ]


async def test_it_batches_tiny_deltas() -> None:
    layer = get_channel_layer()
    assert isinstance(layer, InMemoryChannelLayer)
    channel = await layer.new_channel()
    await layer.group_add(OWNER_GROUP, channel)

    def produce() -> None:
        relay = deltas.Relay(run_id=7, seq=3)
        for _ in range(2000):
            relay.add("text", "x")
        relay.flush()

    await sync_to_async(produce, thread_sensitive=False)()
    messages = []
    while True:
        try:
            messages.append(await asyncio.wait_for(layer.receive(channel), 0.2))
        except TimeoutError:
            break
    await layer.group_discard(OWNER_GROUP, channel)

    assert 1 <= len(messages) <= 3  # one per 100 ms at most, and the last at the end
    assert "".join(m["text"] for m in messages) == "x" * 2000
    offsets = [m["offset"] for m in messages]
    assert offsets == [sum(len(m["text"]) for m in messages[:i]) for i in range(len(messages))]


async def test_it_sends_nothing_when_no_console_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    async def record(self: Any, group: str, message: dict[str, Any]) -> None:
        sent.append(message)

    # No console: not even one a failed test left behind without disconnecting.
    await get_channel_layer().flush()
    monkeypatch.setattr(InMemoryChannelLayer, "group_send", record)
    run = await sync_to_async(scripted_run)([{"text": "Nobody reads this."}])

    await sync_to_async(work, thread_sensitive=False)()

    assert sent == []
    assert (await sync_to_async(Run.objects.get)(pk=run.pk)).status == RunStatus.DONE


async def test_a_failing_channel_layer_never_breaks_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = await sync_to_async(owner_client)()
    socket = await open_socket(client)

    async def broken(self: Any, group: str, message: dict[str, Any]) -> None:
        raise ConnectionError("the channel layer is down")

    monkeypatch.setattr(InMemoryChannelLayer, "group_send", broken)
    run = await sync_to_async(scripted_run)([{"text": "Still recorded."}])

    await sync_to_async(work, thread_sensitive=False)()
    await socket.disconnect()

    assert (await sync_to_async(Run.objects.get)(pk=run.pk)).status == RunStatus.DONE
    step = await sync_to_async(model_step)(run)
    assert isinstance(step.result, dict)
    assert step.result["text"].endswith("Still recorded.")


async def test_a_stuck_channel_layer_never_slows_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deltas, "submit", deltas._sender.submit)
    client = await sync_to_async(owner_client)()
    socket = await open_socket(client)

    async def stuck(self: Any, group: str, message: dict[str, Any]) -> None:
        await asyncio.sleep(4)  # a pool waiting for a database that restarts

    monkeypatch.setattr(InMemoryChannelLayer, "group_send", stuck)
    run = await sync_to_async(scripted_run)([{"text": "Quick."}])

    started = time.monotonic()
    await sync_to_async(work, thread_sensitive=False)()
    elapsed = time.monotonic() - started
    await socket.disconnect()

    assert (await sync_to_async(Run.objects.get)(pk=run.pk)).status == RunStatus.DONE
    assert elapsed < 2.5
