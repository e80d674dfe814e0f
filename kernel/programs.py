"""The step-executor interface: a run executes a *program*, looked up here by name.

A program is a plain function `(ctx: RunContext) -> Outcome`. It must be deterministic given
the results the journal hands back: on resume it runs again from the top, and every step with a
recorded result returns that result without executing. The agent engine registers its loop here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from kernel.exceptions import KernelError
from kernel.models import RunStatus

if TYPE_CHECKING:
    from kernel.context import RunContext


@dataclass(frozen=True)
class Outcome:
    status: str = RunStatus.DONE
    output: Any = None


Program = Callable[["RunContext"], Outcome]

# Recorded on every run; workers only claim runs of their own version, so a long run resumes
# with the engine that started it (or is migrated explicitly). Bump it when a program's steps
# change in a way that would not replay.
ENGINE_VERSION = "1"

# name -> "module:function", imported on first use.
_PROGRAMS: dict[str, str] = {
    "chaos.workflow": "kernel.chaos:workflow",
    "chaos.child": "kernel.chaos:child",
    "chaos.noop": "kernel.chaos:noop",
    "chaos.busy": "kernel.chaos:busy",
    "agent": "missions.engine.loop:agent",
}
_loaded: dict[str, Program] = {}


def register(name: str, target: str) -> None:
    _PROGRAMS[name] = target
    _loaded.pop(name, None)


def get(name: str) -> Program:
    if name not in _loaded:
        target = _PROGRAMS.get(name)
        if target is None:
            raise KernelError(f"No program named {name!r}.", code="unknown_program")
        module, _, function = target.partition(":")
        _loaded[name] = getattr(import_module(module), function)
    return _loaded[name]


def exists(name: str) -> bool:
    return name in _PROGRAMS
