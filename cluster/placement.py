"""Placement: which node runs a step, and the record of each attempt (a `Placement` row).

A node is a candidate when it is enabled, not lost, its telemetry is fresh (`FRESH_SECONDS`; stale
telemetry is asked again on demand) and its runner offers the step's sandbox level; then it
must have the memory and disk the step declares it needs. Among candidates the least busy ones
(steps already running there plus load, per CPU, within a slack) are alike, and the one given a
step longest ago wins, so the steps of one mission spread over the nodes round-robin.

Each attempt takes the next fence of its step (unique per step in the database; see `place`), so
an attempt placed again after its node was lost carries a higher fence than the one it replaces
and the runners refuse the older one.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Collection
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from cluster import nodes, transport
from cluster.models import Node, Placement

FRESH_SECONDS = 180
# Fences of one kernel epoch (the kernel's fence of the step) span PER_EPOCH numbers; the
# runner's fence is a signed 64-bit value, so epochs stop at EPOCHS.
PER_EPOCH = 1 << 20
EPOCHS = 1 << 42
# A placement still `running` after this long lost its caller (a worker killed before it
# recorded the answer): it no longer counts as load on its node. Longer than any step's wall clock.
RUNNING_SECONDS = 4 * 3600
# Loads within this (per CPU) or 30 % of the least loaded node's count as equal: telemetry is a
# snapshot, and a node's load moves by that much between two of them.
LOAD_SLACK = 0.5
# The worktree bytes a node lacks weigh as one more busy CPU per this many: the runner's SSH
# channel carried 4 MiB/s on a loaded two-core machine (docs/cluster.md, "Worktrees on nodes"),
# so this is about four seconds of sending, a short step's worth of one CPU.
TRANSFER_BYTES_PER_LOAD = 16 << 20


@dataclass(frozen=True)
class Needs:
    level: int
    memory_bytes: int = 0
    disk_bytes: int = 0

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(f"needs.level must be 1, 2 or 3, not {self.level!r}")
        if self.memory_bytes < 0 or self.disk_bytes < 0:
            raise ValueError("needs.memory_bytes and needs.disk_bytes cannot be negative")


class NoNode(Exception):
    """No node can run the step now; the message says why each one was passed over."""


def choose(
    needs: Needs, *, exclude: Collection[str] = (), transfer: Callable[[Node], int] | None = None
) -> Node:
    """The node for a step with these needs (see the module docstring). `transfer(node)`: the
    bytes of the step's worktree that node lacks, weighed as load (`TRANSFER_BYTES_PER_LOAD`)."""
    nodes.local_node()
    now = timezone.now()
    fresh_after = now - datetime.timedelta(seconds=FRESH_SECONDS)
    passed: dict[str, str] = {}
    candidates: list[Node] = []
    for node in Node.objects.filter(enabled=True).exclude(name__in=list(exclude)):
        if node.status == Node.Status.LOST:
            passed[node.name] = f"lost since {node.lost_at:%H:%M:%S}: {node.lost_reason}"
            continue
        if node.telemetry_at is None or node.telemetry_at < fresh_after:
            try:
                node = nodes.hello(node)
            except (transport.TransportError, transport.RunnerError, nodes.NodeError) as error:
                passed[node.name] = f"no telemetry: {error}"
                continue
        why = _unfit(node, needs)
        if why:
            passed[node.name] = why
        else:
            candidates.append(node)
    if not candidates:
        details = "; ".join(f"{name}: {why}" for name, why in sorted(passed.items()))
        raise NoNode(f"no node can run a level-{needs.level} step now ({details or 'no nodes'})")
    activity = {
        pk: (running, last)
        for pk, running, last in Node.objects.filter(pk__in=[node.pk for node in candidates])
        .annotate(
            running=Count(
                "placements",
                filter=Q(
                    placements__status=Placement.Status.RUNNING,
                    placements__created_at__gte=now - datetime.timedelta(seconds=RUNNING_SECONDS),
                ),
            ),
            last=Max("placements__created_at"),
        )
        .values_list("pk", "running", "last")
    }
    epoch = datetime.datetime.min.replace(tzinfo=datetime.UTC)

    def load(node: Node) -> float:
        values = node.telemetry_values
        cpus = max(float(values.get("cpus") or 1), 1.0)
        return (activity.get(node.pk, (0, None))[0] + float(values.get("load1") or 0.0)) / cpus

    def cost(node: Node) -> float:
        sent = transfer(node) if transfer is not None else 0
        return load(node) + sent / TRANSFER_BYTES_PER_LOAD

    loads = {node.pk: cost(node) for node in candidates}
    least = min(loads.values())
    # Nodes about as loaded as the least loaded one are equally good: the one given a step
    # longest ago wins, so the steps of a mission go round them.
    alike = [node for node in candidates if loads[node.pk] <= least + max(LOAD_SLACK, least * 0.3)]
    return min(alike, key=lambda node: (activity.get(node.pk, (0, None))[1] or epoch, node.name))


def _unfit(node: Node, needs: Needs) -> str:
    if needs.level not in node.levels:
        offered = ", ".join(str(level) for level in node.levels) or "none"
        return f"offers level {offered}, not {needs.level}"
    values = node.telemetry_values
    available = values.get("mem_available")
    if needs.memory_bytes and isinstance(available, int) and available < needs.memory_bytes:
        return f"{available} bytes of memory available, the step needs {needs.memory_bytes}"
    free = values.get("disk_free")
    if needs.disk_bytes and isinstance(free, int) and free < needs.disk_bytes:
        return f"{free} bytes of disk free, the step needs {needs.disk_bytes}"
    return ""


def place(*, step_id: str, key: str, node: Node, epoch: int = 0) -> Placement:
    """Record a new attempt of the step on `node`, under its next fence: `epoch * 2**20 +` the
    attempt's number within that epoch (the kernel's fence of the step), so fences order
    attempts by epoch first."""
    if not 0 <= epoch < EPOCHS:
        raise ValueError(f"epoch (the step's kernel fence) must be from 0 to {EPOCHS - 1}")
    low, high = epoch * PER_EPOCH, (epoch + 1) * PER_EPOCH
    for _ in range(5):
        top = Placement.objects.filter(step_id=step_id, fence__gt=low, fence__lt=high).aggregate(
            top=Max("fence")
        )["top"]
        fence = (top or low) + 1
        if fence >= high:
            raise ValueError(f"step {step_id} was placed {PER_EPOCH - 1} times in epoch {epoch}")
        try:
            with transaction.atomic():
                placed = Placement.objects.create(step_id=step_id, key=key, node=node, fence=fence)
        except IntegrityError:
            continue  # another attempt took this fence first: take the next one
        Placement.objects.filter(
            step_id=step_id, status=Placement.Status.RUNNING, fence__lt=fence
        ).update(
            status=Placement.Status.ABANDONED,
            error=f"placed again under fence {fence}",
            finished_at=timezone.now(),
        )
        return placed
    raise RuntimeError(f"could not take a fence for step {step_id} (five concurrent placements)")


def finish(
    placement: Placement,
    *,
    status: Placement.Status,
    runner_version: str = "",
    environment: str = "",
    replayed: bool = False,
    error: str = "",
) -> None:
    Placement.objects.filter(pk=placement.pk).update(
        status=status,
        runner_version=runner_version[:64],
        environment=environment[:200],
        replayed=replayed,
        error=error[:4000],
        finished_at=timezone.now(),
    )
    placement.refresh_from_db()


def holders(series: str) -> set[str]:
    """The nodes that answered a step whose id starts with `series` + "-" (the steps of one
    run, `tools.shell.step_ref`): they keep a copy of its worktree."""
    done = Placement.objects.filter(step_id__startswith=f"{series}-", status=Placement.Status.DONE)
    return set(done.values_list("node__name", flat=True).distinct())


def attempts(step_id: str) -> list[Placement]:
    return list(Placement.objects.filter(step_id=step_id).select_related("node"))
