"""What a step's executor meets: the call it gets (`StepCall`), the answer it gives (`Done`), and
the shapes of executors, probes and parallel reads.

Programs and tools import these from `kernel.context`, which re-exports them; they live here so
that the modules `RunContext` is made of (`kernel.waits`) can use them without importing it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kernel.budgets import NO_COST, Cost
from kernel.journal import Fence

logger = logging.getLogger(__name__)


class Stopping(threading.Event):
    """A step's stop signal, set by the lease keeper on a stop, an interrupt or a lost lease.

    An executor that can look at it between two pieces of work waits on it like any event. One
    blocked in a read it cannot look up from (a model's answer streaming in) registers a cut
    with `cutting`: `set` calls it in the setting thread, so the read ends the moment the stop
    is known rather than when the answer is whole."""

    def __init__(self) -> None:
        super().__init__()
        self._cuts: list[Callable[[], None]] = []
        self._cuts_lock = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._cuts_lock:
            cuts = list(self._cuts)
        for cut in cuts:
            _cut(cut)

    @contextmanager
    def cutting(self, cut: Callable[[], None], *, if_set: bool = True) -> Iterator[None]:
        """Call `cut` on the next `set` while the block runs, and at once if the event is set
        already (unless not `if_set`: a stop already dealt with, an interrupt that cut a wait)."""
        with self._cuts_lock:
            self._cuts.append(cut)
        try:
            if if_set and self.is_set():
                _cut(cut)
            yield
        finally:
            with self._cuts_lock:
                self._cuts.remove(cut)


def _cut(cut: Callable[[], None]) -> None:
    try:
        cut()
    except Exception:  # the setter is the lease keeper: it must go on keeping the lease
        logger.exception("cutting a step short failed")


@contextmanager
def cutting(
    stopping: threading.Event, cut: Callable[[], None], *, if_set: bool = True
) -> Iterator[None]:
    """`Stopping.cutting` where `stopping` is one; a plain event (a tool tested on its own)
    cuts nothing."""
    if isinstance(stopping, Stopping):
        with stopping.cutting(cut, if_set=if_set):
            yield
    else:
        yield


@dataclass(frozen=True)
class StepCall:
    """What a step's executor gets: enough to be idempotent, to fence its effect
    (`kernel.leases.fenced(call.fence)`), and a way to notice a stop."""

    run_id: int
    seq: int
    idempotency_key: str
    request: Any
    replay: bool  # the intent was recorded before: a previous attempt may have acted
    stopping: threading.Event
    fence: Fence
    # Something arrived for the run while it executes (an owner message...): worth looking.
    # True on a replayed step, where we cannot know.
    woken: bool = True


@dataclass(frozen=True)
class Done:
    """An executor's answer: the step's result and what it cost."""

    result: Any
    cost: Cost = NO_COST


Executor = Callable[[StepCall], Done]

Probe = Callable[[StepCall], Done | None]  # the recorded effect if it happened, else None


@dataclass(frozen=True)
class ReadStep:
    """One step of `RunContext.parallel`: a read, safe to run alongside others and again."""

    kind: str
    name: str
    request: Any
    execute: Executor
