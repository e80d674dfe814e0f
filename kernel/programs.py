"""The step-executor interface: a run executes a *program*, looked up here by name.

A program is a plain function `(ctx: RunContext) -> Outcome`. It must be deterministic given
the results the journal hands back: on resume it runs again from the top, and every step with a
recorded result returns that result without executing. Applications add theirs to `PROGRAMS`
from their `AppConfig.ready()` (the agent engine adds `agent`); proving code (the chaos
workload) adds its own from the commands and tests that run it, never from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentos.core.registries import Registry
from kernel.exceptions import KernelError
from kernel.models import RunStatus

if TYPE_CHECKING:
    from kernel.context import RunContext


@dataclass(frozen=True)
class Outcome:
    status: str = RunStatus.DONE
    output: Any = None


Program = Callable[["RunContext"], Outcome]

# Recorded on every run. Bump it (a whole number: versions are ordered) when a program's steps
# change in a way that would not replay. A worker claims runs recorded by its own version, and
# runs recorded by an earlier one its program declares in `COMPATIBLE`; a run that came up
# here recorded by an earlier version no program accepts is parked as "needs migration" for the
# owner (`kernel.versions`). Runs recorded by a later version are left to that version's workers.
ENGINE_VERSION = "1"

# Program name -> the function a run of it executes (the apps add theirs from `ready()`).
PROGRAMS: Registry[Program] = Registry("program")
# Program name -> the earlier engine versions whose recorded runs it resumes as they are (declare
# one only when its steps replay unchanged). Programs declaring none are not in it.
COMPATIBLE: Registry[frozenset[str]] = Registry("compatibility declaration")


def compatible() -> dict[str, frozenset[str]]:
    """Each program's declared earlier versions (programs declaring none are left out)."""
    return {name: versions for name, versions in COMPATIBLE.items() if versions}


def resumes(name: str, version: str) -> bool:
    """Whether this code resumes a run of program `name` recorded by engine `version`."""
    return version == ENGINE_VERSION or version in (COMPATIBLE.get(name) or frozenset())


def get(name: str) -> Program:
    """The program `name`; a run naming one this process does not know fails as the kernel's
    own error (`unknown_program`)."""
    program = PROGRAMS.get(name)
    if program is None:
        raise KernelError(f"No program named {name!r}.", code="unknown_program")
    return program
