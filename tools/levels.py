"""Sandbox levels, chosen by policy: a mission's risk class sets its runs' level, a tool's minimum
level can only raise it, and a level no node offers is refused before anything runs.

- **0** read-only research: no sandbox and no shell. Only tools that read (files, memory, the
  ledger, the owner) are given and allowed; anything that writes, needs a sandbox or the network
  is refused.
- **1** code and analysis: bubblewrap in the run's worktree (`cluster.sandbox`).
- **2** untrusted code, package installs: a disposable virtual machine per task.
- **3** GUI automation in a virtual machine: no backend on Linux, never offered.

The harness asks before running a tool (`require`), so a tool the run may not use is refused with
a precise error the model reads, instead of running unconfined or failing somewhere inside.
"""

from __future__ import annotations

from cluster import placement
from tools.base import Risk, Tool, ToolError

# The mission's risk class → its runs' sandbox level.
RISK_CLASSES = {"research": 0, "code": 1, "untrusted": 2}
DEFAULT_RISK_CLASS = "code"
NAMES = {
    0: "read-only research, no shell",
    1: "bubblewrap sandbox",
    2: "a virtual machine per task",
    3: "a GUI virtual machine",
}


def level_for(risk_class: str) -> int:
    try:
        return RISK_CLASSES[risk_class]
    except KeyError:
        raise ValueError(
            f"unknown risk class {risk_class!r}: one of {', '.join(RISK_CLASSES)}"
        ) from None


def allowed_at(tool: Tool, run_level: int) -> bool:
    """Whether a run at `run_level` may use `tool` at all (level 0 reads only)."""
    return run_level > 0 or (tool.risk == Risk.READ and tool.min_sandbox_level <= 0)


def effective(tool: Tool, run_level: int) -> int:
    """The level `tool` runs at in a run at `run_level`: a tool's minimum only raises it."""
    return max(run_level, tool.min_sandbox_level)


def unavailable(level: int) -> str | None:
    """Why no node can run a step at `level` now (None when one can): placement's own answer,
    from each enabled node's telemetry (asked again when stale)."""
    if level <= 0:
        return None
    try:
        placement.choose(placement.Needs(level))
    except placement.NoNode as error:
        return str(error)
    return None


def require(tool: Tool, run_level: int = 1) -> int:
    """The level `tool` runs at; `ToolError` when the run's level forbids it or no node offers
    the level it needs."""
    if not allowed_at(tool, run_level):
        raise ToolError(
            f"Refused: this mission runs at sandbox level 0 ({NAMES[0]}) and {tool.name}"
            + (" needs a sandbox." if tool.min_sandbox_level > 0 else " does not only read.")
            + " Use a read-only tool, or tell the owner."
        )
    level = effective(tool, run_level)
    if tool.min_sandbox_level <= 0:
        return level  # it runs in no sandbox: nothing to find a node for
    why = unavailable(level)
    if why is not None:
        raise ToolError(
            f"Refused: {tool.name} needs sandbox level {level} ({NAMES.get(level, '?')}): {why}."
            " Use another tool, or tell the owner."
        )
    return level
