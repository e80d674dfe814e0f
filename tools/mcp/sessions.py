"""Live MCP sessions, kept between calls: a pool per (server, run) in this process, on one
background event-loop thread that the synchronous kernel steps submit to.

A session starts on a run's first call to one of its server's tools (and for a listing), lists
the server's tools (what `tools.mcp.servers.record_listing` compares with the pins), then answers
calls until it is closed: idle for `IDLE_SECONDS`, older than `MAX_AGE_SECONDS` (its egress token
would expire), its run ended (`close_run`), the kill switch (`close_all`), or a call that ran out
of its deadline (the server may be stuck). A server that died is started again on the next call.

No Django here: the caller resolves the server and its egress (`Target`), in its own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types
from mcp.client._transport import TransportStreams
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from tools.mcp.transport import ServerLog

IDLE_SECONDS = 300.0
MAX_AGE_SECONDS = 3000.0  # under the egress token's lifetime (`cluster.run_tokens`)
START_SECONDS = 30.0  # a server's start, its handshake and its listing
REAP_SECONDS = 5.0

Opener = Callable[[ServerLog], AbstractAsyncContextManager[TransportStreams]]


class SessionError(Exception):
    """The server could not be started, died, or did not answer in time: the message says which
    (with the tail of its stderr), for the model and the owner."""


@dataclass(frozen=True)
class Listing:
    tools: list[mcp_types.Tool]
    version: str  # the server's own "name version", from its handshake


@dataclass
class _Live:
    session: ClientSession
    listing: Listing
    stop: asyncio.Event
    task: asyncio.Task[None]
    log: ServerLog
    started: float = field(default_factory=time.monotonic)
    used: float = field(default_factory=time.monotonic)

    def alive(self) -> bool:
        return not self.task.done() and time.monotonic() - self.started < MAX_AGE_SECONDS


Key = tuple[str, int | None]


class Pool:
    """Sessions by (server name, run id). Thread-safe; one per process (`POOL`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starting: dict[Key, threading.Lock] = {}
        self._live: dict[Key, _Live] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reaping: asyncio.Task[None] | None = None

    # --- The loop thread ---------------------------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    self._reaping = loop.create_task(self._reaper())
                    loop.run_forever()

                threading.Thread(target=main, name="mcp-sessions", daemon=True).start()
                ready.wait(10)
                self._loop = loop
            return self._loop

    def _submit[T](self, coroutine: Coroutine[Any, Any, T], seconds: float) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            coroutine, self._running_loop()
        )
        try:
            return future.result(timeout=seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(REAP_SECONDS)
            now = time.monotonic()
            with self._lock:
                stale = [
                    key
                    for key, live in self._live.items()
                    if now - live.used > IDLE_SECONDS or not live.alive()
                ]
                ending = [self._live.pop(key) for key in stale]
            for live in ending:
                await _end(live)

    # --- Sessions ----------------------------------------------------------------------------

    def session(self, key: Key, opener: Callable[[], Opener]) -> tuple[_Live, Listing | None]:
        """The live session of `key`, started (with `opener()`, called only then) when there
        is none or it died; and its listing when it was just started (None otherwise)."""
        with self._lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:
            with self._lock:
                live = self._live.get(key)
            if live is not None and live.alive():
                live.used = time.monotonic()
                return live, None
            if live is not None:
                self.close(key)
            try:
                live = self._submit(_start(opener()), START_SECONDS + 5)
            except concurrent.futures.TimeoutError:
                raise SessionError(f"the server did not start within {START_SECONDS:g} s") from None
            with self._lock:
                self._live[key] = live
            return live, live.listing

    def call(
        self,
        key: Key,
        opener: Callable[[], Opener],
        tool: str,
        arguments: dict[str, Any],
        *,
        seconds: float,
        stopping: threading.Event | None = None,
    ) -> tuple[mcp_types.CallToolResult, Listing | None]:
        """Call `tool` on `key`'s session within `seconds` (or until `stopping` is set); the
        listing too when the session was started for this call."""
        live, listing = self.session(key, opener)
        future = asyncio.run_coroutine_threadsafe(
            live.session.call_tool(tool, arguments, read_timeout_seconds=seconds),
            self._running_loop(),
        )
        deadline = time.monotonic() + seconds + 1
        while True:
            try:
                result = future.result(timeout=min(0.25, max(deadline - time.monotonic(), 0)))
                break
            except concurrent.futures.TimeoutError:
                if time.monotonic() < deadline and not (stopping and stopping.is_set()):
                    continue
                future.cancel()
                # A server that does not answer may be stuck: the next call starts a new one.
                self.close(key)
                if stopping is not None and stopping.is_set():
                    raise SessionError("the call was cancelled") from None
                raise SessionError(f"the server did not answer within {seconds:g} s") from None
            except MCPError as error:
                # The server answered with an error (a bad argument...): its session is fine,
                # unless the error is the connection's own end.
                if error.code in (mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT):
                    self.close(key)
                raise SessionError(f"the server answered an error: {error.message}") from None
            except Exception as error:
                self.close(key)
                raise SessionError(_failure(error, live.log)) from None
        live.used = time.monotonic()
        return result, listing

    def list_now(self, opener: Opener) -> Listing:
        """A listing from a session of its own, closed right after (registration, approval)."""

        async def listing() -> Listing:
            live = await _start(opener)
            await _end(live)
            return live.listing

        try:
            return self._submit(listing(), START_SECONDS + 10)
        except concurrent.futures.TimeoutError:
            raise SessionError(f"the server did not start within {START_SECONDS:g} s") from None

    def close(self, key: Key) -> None:
        with self._lock:
            live = self._live.pop(key, None)
        if live is not None:
            with contextlib.suppress(Exception):
                self._submit(_end(live), 10)

    def close_run(self, run_id: int) -> None:
        """End `run_id`'s sessions (its run ended)."""
        with self._lock:
            keys = [key for key in self._live if key[1] == run_id]
        for key in keys:
            self.close(key)

    def close_all(self) -> None:
        """End every session (the kill switch, the worker's shutdown)."""
        with self._lock:
            keys = list(self._live)
        for key in keys:
            self.close(key)

    def count(self) -> int:
        with self._lock:
            return sum(1 for live in self._live.values() if live.alive())


async def _start(opener: Opener) -> _Live:
    """Start a session in a holder task (the transport's and the session's scopes are entered
    and left by that one task, as anyio requires), and wait for its handshake and listing."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[tuple[ClientSession, Listing]] = loop.create_future()
    stop = asyncio.Event()
    log = ServerLog()

    async def hold() -> None:
        try:
            async with (
                opener(log) as (reading, writing),
                ClientSession(reading, writing) as session,
            ):
                hello = await session.initialize()
                tools: list[mcp_types.Tool] = []
                cursor: str | None = None
                while True:
                    params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_tools(params=params)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                info = hello.server_info
                ready.set_result((session, Listing(tools, f"{info.name} {info.version}".strip())))
                await stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(SessionError(_failure(error, log)))
            if not isinstance(error, Exception):
                raise

    task = loop.create_task(hold())
    try:
        with anyio.fail_after(START_SECONDS):
            session, listing = await asyncio.shield(ready)
    except TimeoutError:
        stop.set()
        task.cancel()
        raise SessionError(
            f"the server did not start within {START_SECONDS:g} s{_stderr(log)}"
        ) from None
    return _Live(session, listing, stop, task, log)


async def _end(live: _Live) -> None:
    live.stop.set()
    try:
        await asyncio.wait_for(asyncio.shield(live.task), 8)
    except (TimeoutError, asyncio.CancelledError, Exception):
        live.task.cancel()


def _failure(error: BaseException, log: ServerLog) -> str:
    if isinstance(error, SessionError):
        return str(error)
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    what = str(error) or type(error).__name__
    return f"the server failed: {what}{_stderr(log)}"


def _stderr(log: ServerLog) -> str:
    tail = log.tail.strip()
    return f" (its stderr ends: {tail[-600:]})" if tail else ""


POOL = Pool()
