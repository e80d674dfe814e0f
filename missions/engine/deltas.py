"""Model output streamed to open consoles while a model step runs: ephemeral, never stored.

The step's `step.completed` event (kernel.stream) carries the whole text once the step is
recorded; deltas only let the owner watch it being written. They go through the channel layer
to the owner's group:

- batched: at most one send per channel every `FLUSH_SECONDS`, and one at the end of the step;
- from a background thread (as `kernel.bus` doorbells): a channel layer whose database restarts
  takes its pool's timeout to fail, and a model step must never wait for it; if the sender is
  stuck, deltas beyond `MAX_PENDING` batches are dropped;
- only while someone listens: the sender asks the layer at most every `PRESENCE_SECONDS`, and
  while the answer is "nobody" the step's thread drops batches without handing them over.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer

from kernel.bus import OWNER_GROUP, ShuttingDown, layer_call, shutting_down

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.1
PRESENCE_SECONDS = 1.0
MAX_PENDING = 50

Channel = Literal["text", "reasoning"]
Message = dict[str, Any]


class Relay:
    """The deltas of one model response of step (run, seq), buffered between flushes."""

    def __init__(self, run_id: int, seq: int) -> None:
        self.run_id = run_id
        self.seq = seq
        self.pending: list[tuple[Channel, str]] = []
        self.offsets: dict[Channel, int] = {"text": 0, "reasoning": 0}
        self.flushed_at = time.monotonic()

    def add(self, channel: Channel, text: str) -> None:
        if not text:
            return
        self.pending.append((channel, text))
        if time.monotonic() - self.flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Hand what is buffered to the sender: one message per run of the same channel."""
        self.flushed_at = time.monotonic()
        if not self.pending:
            return
        batches: list[tuple[Channel, list[str]]] = []
        for channel, text in self.pending:
            if batches and batches[-1][0] == channel:
                batches[-1][1].append(text)
            else:
                batches.append((channel, [text]))
        self.pending = []
        # Offsets advance even when nobody listens, so a console that opens mid-step knows it
        # missed the beginning.
        messages = []
        for channel, parts in batches:
            text = "".join(parts)
            messages.append(
                {
                    "type": "delta",
                    "run": self.run_id,
                    "seq": self.seq,
                    "channel": channel,
                    "offset": self.offsets[channel],
                    "text": text,
                }
            )
            self.offsets[channel] += len(text)
        if _presence.known_absent():
            return
        _post(messages)


_current: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "model_step", default=None
)


@contextlib.contextmanager
def streaming(run_id: int, seq: int) -> Iterator[None]:
    """Within this block, model output collected by the engine is relayed as step (run, seq)."""
    token = _current.set((run_id, seq))
    try:
        yield
    finally:
        _current.reset(token)


def relay() -> Relay | None:
    """A new relay (offsets at 0) for one model response of the step under way, if any: a
    retried request starts its text again, and so do its offsets."""
    step = _current.get()
    return Relay(*step) if step is not None else None


# --- the sender ------------------------------------------------------------------------------


class _Presence:
    """One cached answer per process: is any console in the owner's group?"""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked_at = float("-inf")
        self.listening = False

    def known_absent(self) -> bool:
        """True while a fresh answer says nobody listens (no I/O: the step's thread asks)."""
        with self.lock:
            fresh = time.monotonic() - self.checked_at < PRESENCE_SECONDS
            return fresh and not self.listening

    def check(self, layer: BaseChannelLayer) -> bool:
        with self.lock:
            if time.monotonic() - self.checked_at < PRESENCE_SECONDS:
                return self.listening
        try:
            listening = _group_has_members(layer)
        except ShuttingDown:
            raise  # not a failure of the layer: the sender below drops the deltas quietly
        except Exception:
            logger.exception("channel layer presence check failed; sending deltas anyway")
            listening = True
        with self.lock:
            self.checked_at, self.listening = time.monotonic(), listening
        return listening

    def forget(self) -> None:
        with self.lock:
            self.checked_at = float("-inf")


_presence = _Presence()
_sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltas")
_pending = threading.BoundedSemaphore(MAX_PENDING)


def _post(messages: list[Message]) -> None:
    if not _pending.acquire(blocking=False):
        logger.debug("delta sender busy; %d delta(s) dropped", len(messages))
        return
    try:
        submit(_send, messages)
    except RuntimeError:  # the interpreter is shutting down
        _pending.release()


# Tests with an in-memory layer send inline, on their own event loop.
submit: Callable[[Callable[[list[Message]], None], list[Message]], Any] = _sender.submit


def _send(messages: list[Message]) -> None:
    try:
        if shutting_down():
            return  # ephemeral: nobody will read them once this process is gone
        layer = get_channel_layer()
        if layer is None or not _presence.check(layer):
            return
        for message in messages:
            layer_call(layer.group_send, OWNER_GROUP, message)
    except ShuttingDown:
        # Ephemeral output of a process that is exiting: nobody will read it.
        logger.debug("%d delta(s) not sent: the process is exiting", len(messages))
    except Exception:
        logger.exception("%d delta(s) not sent", len(messages))
    finally:
        _pending.release()


def _group_has_members(layer: BaseChannelLayer) -> bool:
    if isinstance(layer, InMemoryChannelLayer):  # tests, and single-process setups
        return bool(layer.groups.get(OWNER_GROUP))
    database = getattr(layer, "django_db", None)
    group_key = getattr(layer, "_group_key", None)
    if database is None or group_key is None:
        return True  # a layer we cannot ask: send, and let it drop
    # channels-postgres: its group table, through its own connection pool. A crashed daphne
    # may leave members behind, which costs sends, nothing else.
    channels = layer_call(database.retrieve_group_channels, group_key(OWNER_GROUP))
    return bool(channels)


def forget_presence() -> None:
    """Ask the layer again at the next flush (tests that open a console mid-process)."""
    _presence.forget()
