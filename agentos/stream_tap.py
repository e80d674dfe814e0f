"""One reader of the event stream per server process, shared by every open socket.

Each socket used to number and read the stream itself, every `POLL_SECONDS`, on a new database
connection each time (`CONN_MAX_AGE = 0`): a step reached the owner a quarter of a second after
its commit, and ten open tabs made ten sequencers queueing on one lock. The tap does it once for
all (docs/design.md §11), on a thread and a connection of its own:

1. every `TICK_SECONDS`, it asks the database whether any transaction ended since it last
   looked (`pg_current_snapshot()`, no table read: an idle console costs almost nothing);
2. if one did, it numbers what became visible (`kernel.stream.sequence`), reads the events
   after its head, keeping the last `WINDOW` of them in memory, and renders the steps they
   changed in the runs some socket watches (once, however many tabs show the run);
3. it wakes the sockets, which take what follows their cursor from that window, or read the
   database themselves when the window does not hold it (a socket replaying from far behind,
   or one that resumed ahead of the tap).

Numbers are gapless and final, so a window of consecutive events serves any cursor inside it
exactly as the database would. Doorbells still wake the tap at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import NamedTuple, Protocol

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from agentos import events as events_api
from kernel import stream
from missions import run_views

logger = logging.getLogger(__name__)

# How often the tap looks for ended transactions: the most a commit waits to be numbered.
TICK_SECONDS = 0.01
# Events kept for sockets a little behind; older cursors read the database.
WINDOW = 2000
PAGE_SIZE = 200
# After a failed read (the database away), before the next try.
RETRY_SECONDS = 0.5


class Listener(Protocol):
    """A socket following the stream: woken when the tap has read new events."""

    wake: asyncio.Event
    watching: frozenset[int]


class Framed(NamedTuple):
    """An event, and the frame that carries it to every socket (encoded once for all)."""

    event: stream.StreamEvent
    frame: str


class Shown(NamedTuple):
    """A step of a watched run as the run page shows it, sent after the event `number`."""

    number: int
    run: int
    seq: int
    frame: str  # the `step` message


class Look(NamedTuple):
    snapshot: str
    events: list[Framed]
    # Where the window starts: on the first look, and when the numbers went back (a database
    # restored from a backup numbers from its own head again).
    head: int | None
    shown: list[Shown]


def event_frame(event: stream.StreamEvent) -> str:
    return json.dumps({"type": "event", **events_api.wire(event)}, cls=DjangoJSONEncoder)


def step_frame(run_id: int, seq: int, html: str) -> str:
    return json.dumps({"type": "step", "run": run_id, "seq": seq, "html": html})


class Tap:
    def __init__(self) -> None:
        self.listeners: set[Listener] = set()
        self.events: deque[Framed] = deque(maxlen=WINDOW)
        self.shown: dict[int, list[Shown]] = {}  # by the number of the event they follow
        self.head: int | None = None  # the number of the window's last event; None: not read yet
        self.snapshot: str | None = None  # the transactions running when it last sequenced
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        # One thread, so one connection, kept open from look to look (a new connection per
        # look would cost more than the look).
        self.thread: ThreadPoolExecutor | None = None

    def join(self, listener: Listener) -> None:
        self.listeners.add(listener)
        if self.task is None or self.task.done():
            self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stream-tap")
            self.task = asyncio.get_running_loop().create_task(self._run(self.thread))

    async def leave(self, listener: Listener) -> None:
        self.listeners.discard(listener)
        if self.listeners or self.task is None:
            return
        task, self.task, thread, self.thread = self.task, None, self.thread, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if thread is not None:
            # After any look still running on it: the thread's connection goes with it.
            await asyncio.get_running_loop().run_in_executor(thread, _close)
            thread.shutdown(wait=False)
        self.events.clear()
        self.shown.clear()
        self.head = self.snapshot = None

    def after(self, cursor: int, limit: int) -> list[Framed] | None:
        """The events after `cursor` from the window (at most `limit`), [] when the cursor is at
        the tap's head, None when the window cannot say (the cursor is before it, or ahead)."""
        if self.head is None:
            return None
        before_first = self.head - len(self.events)
        if not before_first <= cursor <= self.head:
            return None
        start = cursor - before_first
        return list(islice(self.events, start, start + limit))

    def steps_after(self, events: list[Framed], runs: frozenset[int]) -> list[Shown]:
        """The steps rendered after these events (taken from the window), of the runs given."""
        return [
            shown
            for framed in events
            for shown in self.shown.get(framed.event["number"], ())
            if shown.run in runs
        ]

    async def _run(self, thread: ThreadPoolExecutor) -> None:
        """1. look; 2. keep what was read and wake the sockets; 3. sleep a tick (or until rung),
        unless a full page says there is more."""
        loop = asyncio.get_running_loop()
        while self.listeners:
            watched = frozenset().union(*(listener.watching for listener in self.listeners))
            try:
                look = await loop.run_in_executor(thread, _look, self.head, self.snapshot, watched)
            except Exception:
                logger.exception("event stream: the tap's read failed")
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self.snapshot = look.snapshot
            if look.head is not None:
                self.events.clear()
                self.shown.clear()
                self.head = look.head
            if look.events:
                self._keep(look)
                for listener in self.listeners:
                    listener.wake.set()
            if len(look.events) == PAGE_SIZE:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), TICK_SECONDS)
            self.wake.clear()

    def _keep(self, look: Look) -> None:
        self.events.extend(look.events)
        self.head = look.events[-1].event["number"]
        for shown in look.shown:
            self.shown.setdefault(shown.number, []).append(shown)
        before_first = self.head - len(self.events)
        for number in [number for number in self.shown if number <= before_first]:
            del self.shown[number]


def _look(after: int | None, snapshot: str | None, watched: frozenset[int]) -> Look:
    """On the tap's thread: (the snapshot now, the events after `after`, the head when `after`
    is None or above it, the watched steps those events changed).

    Nothing can have become visible while the same transactions run as at the last look: a
    commit, or the end of an older transaction holding numbering back, changes the snapshot.
    It is taken before numbering, so what commits meanwhile is seen at the next look.
    """
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_snapshot()::text")
            row = cursor.fetchone()
        now = str(row[0]) if row else ""
        if after is not None and now == snapshot:
            return Look(now, [], None, [])
        stream.sequence()
        if after is None:
            return Look(now, [], stream.head(), [])
        events = stream.page(after, PAGE_SIZE)
        if not events:
            current = stream.head()
            return Look(now, [], current if current < after else None, [])
        # Each changed step once, after the last of its events in this page.
        last: dict[tuple[int, int], int] = {}
        for event in events:
            if event["kind"].startswith("step.") and event["run"] in watched and event["seq"]:
                last[(event["run"], event["seq"])] = event["number"]
        shown = [
            Shown(last[(run_id, seq)], run_id, seq, step_frame(run_id, seq, html))
            for run_id, seq, html in run_views.live_steps(list(last))
        ]
        return Look(now, [Framed(event, event_frame(event)) for event in events], None, shown)
    except Exception:
        # A connection the database dropped (a restart): the next look opens a new one.
        connection.close()
        raise


def _close() -> None:
    # Here, not `connection.close` handed over: the proxy resolves in the thread that reads it.
    connection.close()


_taps: dict[asyncio.AbstractEventLoop, Tap] = {}


def tap() -> Tap:
    """The tap of the running loop (one per server process; tests run several loops)."""
    loop = asyncio.get_running_loop()
    for other in [other for other in _taps if other.is_closed()]:
        del _taps[other]
    found = _taps.get(loop)
    if found is None:
        found = _taps[loop] = Tap()
    return found
