"""Where a sandbox runs: the one place the control plane picks a node for a profile.

`execute` sends a profile (`cluster.sandbox` builds it) to a node's runner and returns the
runner's result (the protocol's `run` result, docs/cluster.md). With a `StepRef` it goes through
`run` (fencing, a result file keyed by the step's idempotency key); without one (readiness checks,
`manage.py sandbox_exec`, the git helpers) it just executes, with no result file.

For now every profile runs on the control plane's own node, `local`, through the runner's
in-process handler (no process hop); placement over SSH nodes replaces the body of `execute` and
`recorded`.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from cluster.runner.handler import Handler
from cluster.runner.protocol import parse_profile

LOCAL = "local"


@dataclass(frozen=True)
class StepRef:
    """The journaled step a sandbox run belongs to: its id (per step, the same across attempts),
    its idempotency key and the fence of this attempt (`kernel.steps.StepCall.fence`)."""

    step_id: str
    key: str
    fence: int


@dataclass(frozen=True)
class Needs:
    """What placement weighs: the level the node must offer and the profile's limits."""

    level: int
    memory_bytes: int
    disk_bytes: int


_local: Handler | None = None
_local_lock = threading.Lock()


def local_node() -> Handler:
    """The control plane's own node: its runner's handler, in this process, on
    `DATA_DIR/node` (a directory of the system's temp dir when Django is not configured)."""
    global _local
    with _local_lock:
        if _local is None:
            if settings.configured:
                state = Path(settings.DATA_DIR) / "node"
            else:
                state = Path(tempfile.gettempdir()) / f"agentos-node-{os.geteuid()}"
            _local = Handler(state, LOCAL)
        return _local


def execute(
    profile: dict[str, Any],
    *,
    step: StepRef | None,
    needs: Needs,
    stopping: threading.Event | None = None,
) -> dict[str, Any]:
    """Run `profile` on a node; raises `RpcError` as the runner answered it (-32602 a bad
    profile, -32010 a stale fence, -32011 a level the node cannot run)."""
    del needs  # one node for now: nothing to weigh
    node = local_node()
    if step is None:
        return node.execute(parse_profile(profile), profile, stopping=stopping)
    params = {"step_id": step.step_id, "key": step.key, "fence": step.fence, "profile": profile}
    result: dict[str, Any] = node.call("run", params, stopping=stopping)
    return result


def recorded(step: StepRef) -> dict[str, Any] | None:
    """The result a node already wrote for this step's key (an attempt that ran it and died
    before the journal recorded it), or None."""
    found: dict[str, Any] | None = local_node().call("result", {"key": step.key})
    return found
