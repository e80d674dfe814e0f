"""One reader of the event stream per server process, shared by every open socket.

A socket that numbered and read the stream itself would do it on a new database connection each
time (`CONN_MAX_AGE = 0`), and ten open tabs would be ten sequencers queueing on one lock; a
step would reach the owner only at that socket's next poll. The tap does it once for all
(docs/design.md §11), on a thread and a connection of its own:

1. every `TICK_SECONDS`, it asks the database whether any transaction ended since it last
   looked (`pg_current_snapshot()`, no table read: an idle console costs one prepared query
   per tick, about 1.5 % of a core);
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
import json
import logging
import threading
from collections import deque
from itertools import islice
from typing import NamedTuple, Protocol

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from agentos import events as events_api
from kernel import statements, stream
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
    """The stream's reader: a thread of its own (so one connection, kept open from look to
    look) looks, and hands what it read to the event loop, which keeps the window and wakes
    the sockets. Looking from the thread, not from the loop, costs an idle console one query
    per tick and no task, future or thread hop."""

    def __init__(self) -> None:
        self.listeners: set[Listener] = set()
        self.events: deque[Framed] = deque(maxlen=WINDOW)
        self.shown: dict[int, list[Shown]] = {}  # by the number of the event they follow
        self.head: int | None = None  # the number of the window's last event; None: not read yet
        self.watched: frozenset[int] = frozenset()  # every listener's runs, read by the thread
        self.rung = threading.Event()  # look now, not at the next tick
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()

    def join(self, listener: Listener) -> None:
        self.listeners.add(listener)
        self.watch_changed()
        if self.thread is None:
            self.stopping = threading.Event()
            self.thread = threading.Thread(
                target=self._run,
                args=(asyncio.get_running_loop(), self.stopping),
                name="stream-tap",
                daemon=True,
            )
            self.thread.start()

    async def leave(self, listener: Listener) -> None:
        self.listeners.discard(listener)
        self.watch_changed()
        if self.listeners or self.thread is None:
            return
        thread, self.thread = self.thread, None
        self.stopping.set()
        self.rung.set()
        # After the look under way, if any: the thread's connection closes with it.
        await asyncio.to_thread(thread.join, 30)
        self.events.clear()
        self.shown.clear()
        self.head = None

    def watch_changed(self) -> None:
        self.watched = frozenset().union(*(listener.watching for listener in self.listeners))

    def ring(self) -> None:
        self.rung.set()

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

    def _run(self, loop: asyncio.AbstractEventLoop, stopping: threading.Event) -> None:
        """On the tap's thread: 1. look; 2. hand what was read to the loop; 3. sleep a tick (or
        until rung), unless a full page says there is more."""
        head: int | None = None
        snapshot: str | None = None
        try:
            while not stopping.is_set():
                try:
                    look = _look(head, snapshot, self.watched)
                except Exception:
                    logger.exception("event stream: the tap's read failed")
                    stopping.wait(RETRY_SECONDS)
                    continue
                snapshot = look.snapshot
                if look.head is not None:
                    head = look.head
                if look.events:
                    head = look.events[-1].event["number"]
                if look.events or look.head is not None:
                    try:
                        loop.call_soon_threadsafe(self._deliver, look, stopping)
                    except RuntimeError:  # the loop is closed: nobody listens any more
                        return
                if len(look.events) == PAGE_SIZE:
                    continue
                self.rung.wait(TICK_SECONDS)
                self.rung.clear()
        finally:
            connection.close()

    def _deliver(self, look: Look, stopping: threading.Event) -> None:
        """On the loop: keep what the thread read and wake the sockets (unless this thread was
        stopped meanwhile: a new one starts from the head)."""
        if stopping is not self.stopping or stopping.is_set():
            return
        if look.head is not None:
            self.events.clear()
            self.shown.clear()
            self.head = look.head
        if look.events:
            self.events.extend(look.events)
            self.head = look.events[-1].event["number"]
            for shown in look.shown:
                self.shown.setdefault(shown.number, []).append(shown)
            before_first = self.head - len(self.events)
            for number in [number for number in self.shown if number <= before_first]:
                del self.shown[number]
            for listener in self.listeners:
                listener.wake.set()


_SNAPSHOT = "SELECT pg_current_snapshot()::text"


def _look(after: int | None, snapshot: str | None, watched: frozenset[int]) -> Look:
    """On the tap's thread: (the snapshot now, the events after `after`, the head when `after`
    is None or above it, the watched steps those events changed).

    Nothing can have become visible while the same transactions run as at the last look: a
    commit, or the end of an older transaction holding numbering back, changes the snapshot.
    It is taken before numbering, so what commits meanwhile is seen at the next look.
    """
    try:
        # Prepared, on the journal's cursor: the least a query costs the client (it runs every
        # tick while a console is open).
        row = statements.execute(_SNAPSHOT, {}).fetchone()
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
