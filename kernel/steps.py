"""What a step's executor meets: the call it gets (`StepCall`), the answer it gives (`Done`), and
the shapes of executors, probes and parallel reads.

Programs and tools import these from `kernel.context`, which re-exports them; they live here so
that the modules `RunContext` is made of (`kernel.waits`) can use them without importing it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel.budgets import NO_COST, Cost
from kernel.journal import Fence


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
