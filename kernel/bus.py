"""Doorbells to the owner's open pages, rung only after the state they announce is committed.

The channel layer may drop a message (channels-postgres loses sends in its start-up window), so a
doorbell only says "look again": pages re-read state from the database when it rings.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from agentos.core import reachability

OWNER_GROUP = "owner"
LAYER_TIMEOUT_SECONDS = 60.0
EXIT_TIMEOUT_SECONDS = 2.0  # a send made while the interpreter exits
logger = logging.getLogger(__name__)


def layer_call[T](function: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Await a channel layer call from synchronous code, on the process's one event loop.

    channels-postgres keeps one connection pool per process, and the tasks that refill it run
    on the loop that opened it. `async_to_sync` gives each call a new loop, closed right after:
    once the database restarts, a pool opened that way can never refill (a `PoolTimeout` on
    every send until the process restarts, found by `make chaos`). So every call of a process
    goes to one loop that lives as long as it: the ASGI server's (`adopt_running_loop`), else a
    thread of ours. In-process tests send inline instead (`DOORBELLS_IN_BACKGROUND` off): their
    in-memory layer's queues belong to the caller's loop.
    """
    if not settings.DOORBELLS_IN_BACKGROUND:
        return async_to_sync(function)(*args)
    loop = _process_loop()
    if _running_loop() is loop:
        raise RuntimeError("layer_call would wait on its own event loop: await the layer instead")
    future = asyncio.run_coroutine_threadsafe(_awaited(function, *args), loop)
    # While the interpreter exits, a stuck layer must not hold the process for a minute.
    return future.result(EXIT_TIMEOUT_SECONDS if shutting_down() else LAYER_TIMEOUT_SECONDS)


class ShuttingDown(RuntimeError):
    """The interpreter is exiting: no thread can start, so no loop for the channel layer."""


def shutting_down() -> bool:
    """True once the interpreter has begun to exit (it joins threads; none can start now).

    CPython's own flag, set by `threading._shutdown` before it joins the threads that could
    still be sending (the pools of `concurrent.futures` rely on the same step).
    """
    return bool(getattr(threading, "_SHUTTING_DOWN", False))


async def _awaited[T](function: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await function(*args)


_loop: asyncio.AbstractEventLoop | None = None
_loop_thread: threading.Thread | None = None  # None while the loop is the ASGI server's
_loop_lock = threading.Lock()


def adopt_running_loop() -> None:
    """Make the running loop (the ASGI server's) the process's loop for `layer_call`, unless
    one was chosen already: its consumers and our sends then share one loop, and one pool."""
    global _loop
    if _loop is None:
        with _loop_lock:
            if _loop is None:
                _loop = asyncio.get_running_loop()


def _process_loop() -> asyncio.AbstractEventLoop:
    """The process's loop, started on a thread of ours if none runs yet.

    A loop is published only once its thread has started: a loop nobody runs would make every
    later call wait its whole timeout (at interpreter exit no thread can start, and one minute
    per doorbell or delta kept a finished script alive).
    """
    global _loop, _loop_thread
    with _loop_lock:
        ours_died = _loop_thread is not None and not _loop_thread.is_alive()
        if _loop is None or _loop.is_closed() or ours_died:
            if shutting_down():
                raise ShuttingDown("the interpreter is exiting: channel layer call skipped")
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="channel-layer", daemon=True)
            try:
                thread.start()
            except RuntimeError as error:  # "can't create new thread at interpreter shutdown"
                loop.close()
                raise ShuttingDown(str(error)) from error
            _loop, _loop_thread = loop, thread
        return _loop


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def ring_on_commit(kind: str, **data: Any) -> None:
    """After the current transaction commits, tell open consoles that `kind` changed."""
    transaction.on_commit(lambda: ring(kind, **data))


def ring(kind: str, **data: Any) -> None:
    """Send in the background: a broken channel layer (its database restarting) can take its
    pool's timeout to fail, and a worker's step or an owner's request must never wait for it.
    (In-process tests use the in-memory layer, which only works from the caller's thread.)"""
    if settings.DOORBELLS_IN_BACKGROUND:
        _sender.submit(_send, kind, data)
    else:
        _send(kind, data)


# One sender thread: doorbells are rare, their order does not matter, and a stuck send must
# not pile up threads.
_sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="doorbell")


def _send(kind: str, data: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:  # channels swallows layer construction errors and hands back None
        logger.warning("no channel layer configured; doorbell %s not sent", kind)
        return
    try:
        layer_call(layer.group_send, OWNER_GROUP, {"type": "doorbell", "kind": kind, **data})
    except ShuttingDown:
        logger.debug("doorbell %s not sent: the process is exiting", kind)
    except Exception as error:
        # A lost doorbell costs a page a refresh, never state: note it and go on (quietly while
        # the database is away or its pool still holds connections from before it returned).
        log = logger.info if reachability.is_unreachable(error) else logger.warning
        log("doorbell %s not sent: %s: %s", kind, error.__class__.__name__, error)
