"""The one way a test waits for what another thread or process does: a poll with a deadline.

A negative check ("nothing happened") waits the same way for the event that would have made it
happen, then asserts; never a bare sleep.
"""

import time
from collections.abc import Callable

import pytest


def wait_for[T](
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    message: str,
    interval: float = 0.02,
    pause: Callable[[float], object] = time.sleep,
) -> T:
    """Return the predicate's first truthy value, asking every `interval` seconds.

    Fails the test saying what was awaited (`message`, e.g. "the run to end") and for how long
    once `timeout` seconds pass without one. `pause` waits between two asks: a browser test
    passes one that lets the page's event loop run.
    """
    began = time.monotonic()
    while not (found := predicate()):
        waited = time.monotonic() - began
        if waited >= timeout:
            pytest.fail(f"waited {waited:.1f} s (timeout {timeout:g} s) for {message}")
        pause(interval)
    return found
