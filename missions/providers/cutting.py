"""Cutting a model's streamed answer short from another thread, the moment its run must stop.

The reading thread is blocked in the socket read of a stream that may go on for minutes; it
cannot look at a stop signal between two chunks that never come. The run's stop signal calls
the cut from the thread that sets it (`kernel.steps.Stopping.cutting`): it shuts the response's
socket down, which closes the TCP connection (the provider stops generating, and billing) and
wakes the blocked read with an end of stream. The adapter's read then fails as a dropped stream
would, and `cuttable` reports it as `Aborted` instead: cut on purpose, never retried.

A cut that comes before the response's headers (the request is still being sent or answered)
takes effect once they arrive: the socket is not ours to reach before that.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

import httpx2

from missions.providers.base import Aborted, Usage, Watch


class Cut:
    """The cut of one response: called from the stopping thread, attached to the response by
    the reading one, in either order."""

    def __init__(self) -> None:
        self.done = False
        self._response: httpx2.Response | None = None
        self._lock = threading.Lock()

    def attach(self, response: httpx2.Response) -> None:
        with self._lock:
            self._response = response
            done = self.done
        if done:
            _shut(response)

    def __call__(self) -> None:
        with self._lock:
            self.done = True
            response = self._response
        if response is not None:
            _shut(response)


def _shut(response: httpx2.Response) -> None:
    if response.is_closed:
        return  # read to its end already: its connection may serve another request now
    network = response.extensions.get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if isinstance(sock, socket.socket):
        # shutdown, not close: a close from another thread does not wake a blocked read.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    else:  # a transport without a socket of its own: what httpx offers
        response.close()


@contextlib.contextmanager
def cuttable(abort: Watch | None, usage: Callable[[], Usage] = Usage) -> Iterator[Cut]:
    """Read a response under `abort`: once cut, whatever the read raises becomes `Aborted`,
    carrying the usage the provider had reported so far (`usage()`)."""
    cut = Cut()
    if abort is None:
        yield cut
        return
    try:
        with abort(cut):
            yield cut
    except Exception as error:
        if not cut.done:
            raise
        raise Aborted(
            "the answer was cut short: its run is stopping or was interrupted", usage=usage()
        ) from error
