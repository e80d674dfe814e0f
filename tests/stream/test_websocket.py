"""The event stream over the console's WebSocket: resume by cursor, replay, then live."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import websockets
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection
from django.test import Client

from agentos import stream_tap
from agentos.asgi import application
from kernel import journal, runs, stream
from kernel.models import Event, Run, RunStatus, Wait
from kernel.worker import Worker
from tests.factories import make_owner, verified_client
from tests.kernel.factories import make_mission
from tests.live import running_stack
from tests.polling import wait_for
from tests.stream import programs

pytestmark = pytest.mark.django_db(transaction=True)


async def in_thread[T](function: Callable[[], T]) -> T:
    """Run blocking database work on a thread of its own (as a worker process would)."""

    def run() -> T:
        try:
            return function()
        finally:
            connection.close()

    return await asyncio.to_thread(run)


async def open_socket(client: Client) -> WebsocketCommunicator:
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    socket = WebsocketCommunicator(
        application,
        "/ws/events",
        headers=[
            (b"host", b"127.0.0.1:8000"),
            (b"origin", b"http://127.0.0.1:8000"),
            (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
        ],
    )
    connected, _code = await socket.connect()
    assert connected
    assert await socket.receive_json_from() == {"type": "hello"}
    return socket


async def next_event(socket: WebsocketCommunicator) -> dict[str, Any]:
    """The next stream event, past doorbells and deltas."""
    while True:
        message = await socket.receive_json_from(timeout=20)
        if message["type"] == "event":
            return message  # type: ignore[no-any-return]  # JSON from the socket


def owner_client() -> Client:
    return verified_client(make_owner())


def row(event: dict[str, Any]) -> tuple[Any, ...]:
    return (event["number"], event["kind"], event["run"], event["seq"], event["data"])


def table() -> list[tuple[Any, ...]]:
    """The events table, numbered rows in number order: the reference."""
    return [
        (e.number, e.kind, e.run_id, e.seq, e.data)
        for e in Event.objects.filter(number__gt=0).order_by("number")
    ]


def start_story(count: int, **input: Any) -> list[int]:
    mission = make_mission()
    return [
        runs.start_run(account=mission, program="test.stream.story", input=input).pk
        for _ in range(count)
    ]


def work() -> None:
    Worker(lease_seconds=30).run_until_idle()


def answer_all(run_ids: list[int]) -> None:
    for wait in Wait.objects.filter(run_id__in=run_ids, state="open"):
        runs.answer_wait(wait.pk, answer={"text": "yes"})


async def test_it_delivers_every_event_exactly_once_across_a_reconnect_mid_run() -> None:
    """The acceptance test of the stream: what a phone that lost signal mid-run receives, once
    it reconnects with its cursor, is exactly the events table, in order."""
    client = await sync_to_async(owner_client)()
    received: list[dict[str, Any]] = []
    programs.GATE.clear()

    socket = await open_socket(client)
    await socket.send_json_to({"type": "resume", "after": 0})
    run_ids = await sync_to_async(start_story)(2, steps=4, pause=0.01, ask=True, gate=True)
    # Two workers: both runs execute at once, their events interleave.
    first = asyncio.gather(in_thread(work), in_thread(work))
    # Mid-run: both runs are held at their gated step, whose intent the client has seen...
    while sum(1 for e in received if e["data"].get("name") == "slow 0") < 2:
        received.append(await next_event(socket))
    # ...when the phone loses signal: whatever was in flight is lost with the connection.
    await socket.disconnect()
    programs.GATE.set()
    await first
    assert set(await sync_to_async(run_statuses)(run_ids)) == {RunStatus.WAITING}

    # The owner answers elsewhere; the runs go on while the phone reconnects.
    await sync_to_async(answer_all)(run_ids)
    second = asyncio.gather(in_thread(work), in_thread(work))
    socket = await open_socket(client)
    await socket.send_json_to({"type": "resume", "after": received[-1]["number"]})
    await second
    head = await in_thread(lambda: (stream.sequence(), stream.head())[1])
    while received[-1]["number"] < head:
        received.append(await next_event(socket))
    await socket.disconnect()

    assert set(await sync_to_async(run_statuses)(run_ids)) == {RunStatus.DONE}
    expected = await sync_to_async(table)()
    assert [row(event) for event in received] == expected
    assert [event["number"] for event in received] == list(range(1, head + 1))
    kinds = {event["kind"] for event in received}
    assert {"run.created", "step.started", "step.completed", "wait.opened"} <= kinds
    assert {"wait.answered", "run.waiting", "run.finished"} <= kinds


def run_statuses(run_ids: list[int]) -> list[str]:
    return list(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True))


async def test_it_replays_in_pages_then_streams_new_events() -> None:
    client = await sync_to_async(owner_client)()
    await sync_to_async(append)(450)

    socket = await open_socket(client)
    await socket.send_json_to({"type": "resume", "after": 10})
    replayed = [await next_event(socket) for _ in range(440)]
    await sync_to_async(append)(3)
    live = [await next_event(socket) for _ in range(3)]
    await socket.disconnect()

    assert [e["number"] for e in replayed + live] == list(range(11, 454))
    assert [e["data"]["index"] for e in live] == [0, 1, 2]


def append(count: int) -> None:
    for index in range(count):
        journal.append_event("tick", index=index)


async def test_it_starts_at_the_head_when_asked_for_now() -> None:
    client = await sync_to_async(owner_client)()
    await sync_to_async(append)(5)

    socket = await open_socket(client)
    await socket.send_json_to({"type": "resume", "after": "now"})
    # The server answers in order: its answer to a bad message says the resume was handled.
    await socket.send_json_to({"type": "ping"})
    assert (await socket.receive_json_from(timeout=20))["code"] == "invalid_message"
    await sync_to_async(append)(1)
    event = await next_event(socket)
    await socket.disconnect()

    assert event["number"] == 6


async def test_it_refuses_a_cursor_from_the_future_and_stays_usable() -> None:
    client = await sync_to_async(owner_client)()
    await sync_to_async(append)(2)

    socket = await open_socket(client)
    await socket.send_json_to({"type": "resume", "after": 99})
    refused = await socket.receive_json_from()
    await socket.send_json_to({"type": "resume", "after": 1})
    event = await next_event(socket)
    await socket.disconnect()

    assert refused["type"] == "error"
    assert refused["code"] == "cursor_ahead"
    assert refused["head"] == 2
    assert event["number"] == 2


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"type": "resume", "after": -1}, "invalid_cursor"),
        ({"type": "resume", "after": "7"}, "invalid_cursor"),
        ({"type": "resume", "after": True}, "invalid_cursor"),
        ({"type": "resume"}, "invalid_cursor"),
        ({"type": "subscribe"}, "invalid_message"),
        ([1, 2], "invalid_message"),
        ({"type": "watch", "runs": "7"}, "invalid_watch"),
        ({"type": "watch", "runs": [7, True]}, "invalid_watch"),
        ({"type": "watch", "runs": list(range(1, 30))}, "invalid_watch"),
    ],
)
async def test_it_answers_a_bad_message_and_stays_open(message: Any, code: str) -> None:
    client = await sync_to_async(owner_client)()
    socket = await open_socket(client)

    await socket.send_json_to(message)
    answer = await socket.receive_json_from()
    await socket.send_to(text_data="{not json")
    malformed = await socket.receive_json_from()
    await socket.send_json_to({"type": "resume", "after": 0})
    await sync_to_async(append)(1)
    event = await next_event(socket)
    await socket.disconnect()

    assert (answer["type"], answer["code"]) == ("error", code)
    assert malformed["code"] == "invalid_message"
    assert event["number"] == 1


async def next_of(socket: WebsocketCommunicator, kind: str) -> dict[str, Any]:
    while (message := await socket.receive_json_from(timeout=20))["type"] != kind:
        pass
    return message  # type: ignore[no-any-return]  # JSON from the socket


async def test_it_pushes_the_steps_of_watched_runs_as_the_run_page_shows_them() -> None:
    """A run page swaps its steps in from the socket, without a request: after the events that
    changed a step of a run it watches, the socket sends that step rendered, once per batch,
    never older than the event; a socket watching no run gets only the events."""
    client = await sync_to_async(owner_client)()
    watching = await open_socket(client)
    other = await open_socket(client)
    (run_id,) = await sync_to_async(start_story)(1, steps=1)
    await watching.send_json_to({"type": "watch", "runs": [run_id]})
    for socket in (watching, other):
        await socket.send_json_to({"type": "resume", "after": 0})  # all of it: the run's start
    await in_thread(work)

    shown: dict[int, str] = {}
    while len(shown) < 3 or "step-open" in shown[3]:
        step = await next_of(watching, "step")
        assert step["run"] == run_id
        shown[step["seq"]] = step["html"]
    await next_of(other, "event")
    left = []
    while not other.output_queue.empty():
        left.append(await other.receive_json_from())
    for socket in (watching, other):
        await socket.disconnect()

    assert 'id="step-1"' in shown[1]
    assert "Looking." in shown[1]  # the model's text, as the timeline shows it
    assert "no such file" in shown[2]  # the tool call's output
    assert 'id="step-3"' in shown[3]
    assert "step-open" not in shown[3]  # its last push shows it done
    assert not [message for message in left if message["type"] == "step"]


async def test_a_socket_that_watches_runs_is_sent_only_theirs_and_where_the_stream_is() -> None:
    """Ten runs streaming would send every run page every run's events: a page watching runs
    gets theirs and those of no run, then (once idle) the number the stream went past."""
    client = await sync_to_async(owner_client)()
    socket = await open_socket(client)
    (watched,) = await sync_to_async(start_story)(1)
    await socket.send_json_to({"type": "watch", "runs": [watched]})
    await socket.send_json_to({"type": "resume", "after": 0})
    await in_thread(work)
    await sync_to_async(append)(1)
    # The stream ends with another run's events: the socket is told where it went past them.
    (other,) = await sync_to_async(start_story)(1)
    await in_thread(work)
    head = await in_thread(lambda: (stream.sequence(), stream.head())[1])

    received: list[dict[str, Any]] = []
    while not received or received[-1]["type"] != "cursor" or received[-1]["number"] < head:
        message = await socket.receive_json_from(timeout=20)
        if message["type"] in ("event", "cursor"):
            received.append(message)
    await socket.disconnect()

    events = [message for message in received if message["type"] == "event"]
    assert {event["run"] for event in events} == {watched, None}
    assert [event["kind"] for event in events if event["run"] is None] == ["tick"]
    assert [event["number"] for event in events] == sorted(event["number"] for event in events)
    assert received[-1] == {"type": "cursor", "number": head}
    table_runs = await sync_to_async(lambda: {row[2] for row in table()})()
    assert other in table_runs  # its events were numbered, and not sent


async def test_it_serves_every_socket_of_the_process_from_one_tap() -> None:
    """Three open sockets, one reader: the tap numbers and reads the stream once for all of
    them, and each gets every event (from the tap's window, not a query of its own)."""
    client = await sync_to_async(owner_client)()
    sockets = [await open_socket(client) for _ in range(3)]
    for socket in sockets:
        await socket.send_json_to({"type": "resume", "after": 0})  # nothing yet
    tap = stream_tap.tap()
    await sync_to_async(append)(3)
    received = [[await next_event(socket) for _ in range(3)] for socket in sockets]
    listeners = len(tap.listeners)
    for socket in sockets:
        await socket.disconnect()

    assert listeners == 3
    assert all([event["data"]["index"] for event in events] == [0, 1, 2] for events in received)
    numbers = [event["number"] for event in received[0]]
    assert tap.after(numbers[0] - 1, 10) is None  # all left: the tap stopped and forgot
    assert tap.thread is None


def forget_events() -> None:
    """What a database restored from an older backup looks like to a running server."""
    Event.objects.all().delete()


async def test_the_tap_starts_again_at_the_head_when_the_numbers_go_back() -> None:
    client = await sync_to_async(owner_client)()
    first = await open_socket(client)
    await first.send_json_to({"type": "resume", "after": 0})
    await sync_to_async(append)(3)
    assert [(await next_event(first))["number"] for _ in range(3)] == [1, 2, 3]
    tap = stream_tap.tap()

    await sync_to_async(forget_events)()
    await sync_to_async(wait_for)(
        lambda: tap.head == 0, timeout=10, message="the tap to see the numbers go back"
    )
    await sync_to_async(journal.append_event)("after the restore")
    second = await open_socket(client)
    await second.send_json_to({"type": "resume", "after": 0})
    event = await next_event(second)
    for socket in (first, second):
        await socket.disconnect()

    assert (event["number"], event["kind"]) == (1, "after the restore")


async def test_it_shows_an_approval_request_when_it_opens() -> None:
    client = await sync_to_async(owner_client)()
    socket = await open_socket(client)
    await socket.send_json_to({"type": "resume", "after": "now"})

    run_ids = await sync_to_async(start_story)(1, ask=True)
    await in_thread(work)
    while (event := await next_event(socket))["kind"] != "wait.opened":
        pass
    await socket.disconnect()

    assert event["run"] == run_ids[0]
    assert event["mission"] is not None
    assert event["wait"]["type"] == "question"
    assert event["wait"]["text"] == "Go on?"


def make_token() -> str:
    from django.test import override_settings

    from agentos.core import tokens

    # The stack runs the product settings, which do not know the tests' fast password hasher.
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.PBKDF2PasswordHasher"]):
        owner = make_owner()
    return tokens.create_token(owner=owner.user, name="stream", scopes=["read"]).secret


def test_a_script_streams_with_its_token_from_the_real_stack(tmp_path: Path) -> None:
    """`manage.py serve` with two workers: health counts both, and a script with a `read` token
    in its handshake's Authorization header streams events; without it, the handshake fails."""
    secret = make_token()
    append(3)

    with running_stack(tmp_path, workers=2) as running:
        running.wait_for_workers()
        wait_for(
            lambda: running.health()["workers"]["detail"] == "2 of 2 workers live",
            timeout=60,
            message="both workers to beat",
            interval=0.2,
        )
        url = running.url.replace("http://", "ws://") + "/ws/events"

        async def stream() -> list[dict[str, Any]]:
            headers = {"Authorization": f"Bearer {secret}"}
            async with websockets.connect(url, additional_headers=headers) as socket:
                assert json.loads(await socket.recv()) == {"type": "hello"}
                await socket.send(json.dumps({"type": "resume", "after": 0}))
                received: list[dict[str, Any]] = []
                while len(received) < 3:
                    message = json.loads(await asyncio.wait_for(socket.recv(), 30))
                    if message["type"] == "event":
                        received.append(message)
                return received

        received = asyncio.run(stream())
        with pytest.raises(websockets.InvalidStatus) as refused:
            asyncio.run(websockets.connect(url).__aenter__())

    assert [(event["kind"], event["data"]) for event in received] == [
        ("tick", {"index": index}) for index in range(3)
    ]
    assert refused.value.response.status_code == 403
