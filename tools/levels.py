"""Sandbox levels: a tool runs only on a node that offers at least its minimum level.

Level 0 is no sandbox, 1 bubblewrap (`cluster.sandbox`), 2 and 3 disposable VMs (not built yet).
The harness asks before running a tool, so a tool that needs isolation is refused with a precise
error the model reads, instead of running unconfined or failing somewhere inside.
"""

from __future__ import annotations

from tools.base import Tool, ToolError


def require(tool: Tool) -> None:
    """Raise `ToolError` when this node cannot give `tool` the sandbox level it needs."""
    if tool.min_sandbox_level <= 0:
        return  # nothing to check: no sandbox needed, and no sandbox started to find out
    from cluster import sandbox  # imported here: it loads libseccomp on first use

    offered, why = sandbox.offered_level()
    if offered < tool.min_sandbox_level:
        raise ToolError(
            f"Refused: {tool.name} needs sandbox level {tool.min_sandbox_level} and this node"
            f" offers level {offered} ({why}). Use another tool, or tell the owner."
        )
