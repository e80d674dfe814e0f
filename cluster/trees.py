"""Whether a run may still reach out through its egress socket, for `cluster.egress`: not once its
tree has stopped (a final status) nor once a stop is requested (the owner's, a budget cap's, the
kill switch's: `kernel.runs.request_stop` raises `cancel_requested` on every run of the subtree),
long before a worker notices and ends the runs. Read fresh for every request (two primary-key
queries); the reaper reads it for every open socket when the kernel's channel rings (a stop
rings it at its commit) and every `cluster.egress.REAP_SECONDS` besides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kernel import scheduler
from kernel.models import TERMINAL, Run

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tree:
    account_id: int | None
    root_id: int
    stopped: str  # why its requests are refused, or ""


def judge(run_ids: Iterable[int]) -> dict[int, Tree]:
    """Each run's tree, in two queries whatever their number: the runs, then the state of each
    and of the runs above them (the root and every ancestor: a stop asked of a subtree flags
    that subtree alone)."""
    wanted = list(run_ids)
    rows = {
        pk: (account_id, root_id or pk, [int(a) for a in ancestors or []])
        for pk, account_id, root_id, ancestors in Run.objects.filter(pk__in=wanted).values_list(
            "pk", "account_id", "root_id", "ancestors"
        )
    }
    ids = set(rows).union(*([root_id, *ancestors] for _, root_id, ancestors in rows.values()))
    states = {
        pk: (status, stopping, reason)
        for pk, status, stopping, reason in Run.objects.filter(pk__in=ids).values_list(
            "pk", "status", "cancel_requested", "stop_reason"
        )
    }
    trees: dict[int, Tree] = {}
    for run_id in wanted:
        if run_id not in rows or run_id not in states:
            trees[run_id] = Tree(None, run_id, "no such run")
            continue
        account_id, root_id, ancestors = rows[run_id]
        why = _why(*states[run_id], whose="the run")
        for above in dict.fromkeys([root_id, *ancestors]):
            if not why and above != run_id and above in states:
                why = _why(*states[above], whose="its run tree")
        trees[run_id] = Tree(account_id, root_id, why)
    return trees


def _why(status: str, stopping: bool, reason: str, *, whose: str) -> str:
    if status in TERMINAL:
        ended = "has ended" if whose == "the run" else "has stopped"
        return f"{whose} {ended} ({status})"
    if stopping:
        return f"{whose} is stopping ({reason or 'cancelled'})"
    return ""


class Doorbell(scheduler.Listener):
    """Calls `ring` at every notification on the kernel's channel, and at each (re)connection: a
    stop requested rings it at its commit (`kernel.scheduler.wake`, and the database's
    `steer:<run>` for a run a worker holds). One lost costs the reaper's next poll."""

    def __init__(self, ring: Callable[[], object]) -> None:
        super().__init__("egress-doorbell", lambda _payload: ring(), timeout=0.25)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)
