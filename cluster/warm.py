"""The control plane's side of warm level-2 VMs (docs/cluster.md "Level 2"): a run's level-2
commands carry its key (`key(run_id)`, set by `cluster.sandbox.profile`), so a node boots one VM
for the run's first command and reuses it for the next; its browser (`cluster.browser`) has a VM
of its own (`browser_key`: no workspace, its own size, so neither replaces the other); `release`
destroys the run's VMs on every node when the run's execution ends. A node that does not answer
is logged, not waited for: its VM ends itself once idle (`cluster.runner.vmpool.IDLE_SECONDS`),
and the kill switch's `stop_all` destroys every warm VM of a node with its sandboxes.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

RELEASE_SECONDS = 10  # per node


def key(run_id: int) -> str:
    """The warm-VM key of a run's commands (a runner state file name: `[A-Za-z0-9_.-]`)."""
    return f"run-{run_id}"


def browser_key(run_id: int) -> str:
    """The warm-VM key of a run's browser, Chromium kept running in it between pages."""
    return f"run-{run_id}-browser"


def release(run_id: int) -> list[str]:
    """Destroy `run_id`'s warm VMs on every enabled node; the nodes that had one."""
    # Imported here: `cluster.sandbox` imports this module, and serves programs without Django.
    from cluster import nodes, transport
    from cluster.models import Node

    released = []
    nodes.local_node()  # the control plane's own node is always asked
    for node in Node.objects.filter(enabled=True).order_by("name"):
        for name in (key(run_id), browser_key(run_id)):
            try:
                answer = nodes.call(node, "release", {"warm": name}, timeout=RELEASE_SECONDS)
            except (transport.TransportError, transport.RunnerError, nodes.NodeError) as error:
                logger.warning("run %s: node %s kept its warm VM: %s", run_id, node.name, error)
                break  # the node does not answer: its VMs end themselves once idle
            if answer.get("released") and node.name not in released:
                released.append(node.name)
    return released
