"""The Cluster screen: each node with its telemetry and when it was collected, its runner's
version and the sandbox levels it offers, and the sandboxes running now with the step each
serves. A tap asks every node again. The admin stays the place to add or disable nodes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from cluster import nodes
from cluster.models import Node, Placement

# How a shell step names itself to the runners (`tools.shell`): run, incarnation, step.
STEP = re.compile(r"^run-(?P<run>\d+)-\d+-(?P<seq>\d+)$")


@dataclass(frozen=True)
class Active:
    placement: Placement
    run_id: int | None
    seq: int | None


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def cluster_screen(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        # Every node's `hello`, now: the answers (or why a node did not answer) land on the rows.
        nodes.refresh_all()
        return redirect("console:cluster")
    nodes.local_node()  # the control plane's own node is always listed
    running = Placement.objects.filter(status=Placement.Status.RUNNING).select_related("node")
    active: dict[int, list[Active]] = {}
    for placement in running.order_by("created_at"):
        found = STEP.match(placement.step_id)
        active.setdefault(placement.node_id, []).append(
            Active(
                placement,
                int(found["run"]) if found else None,
                int(found["seq"]) if found else None,
            )
        )
    rows: list[dict[str, Any]] = [
        {"node": node, "values": node.telemetry_values, "active": active.get(node.pk, [])}
        for node in Node.objects.order_by("name")
    ]
    context = {"screen": SCREENS_BY_SLUG["cluster"], "rows": rows}
    return render(request, "console/cluster.html", context)
