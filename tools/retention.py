"""How long a run's worktree is kept, and the sweep that removes the ones past it.

A finished run's worktree is kept `WORKTREE_DAYS` days after the run ended (forks start from it,
the owner may look at it), and removed sooner — at the next sweep — when nothing in it can be lost:
the run ended done and its last push came after its last workspace write. A removed worktree's
run keeps its journal; forking from it is then refused with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from kernel import journal
from kernel.models import TERMINAL, Run, RunStatus, Step
from tools import workspace

# Steps that change a worktree: a push after the last of them has sent everything committed.
WRITES = ("shell", "edit_file", "write_file", "git_commit", "git_branch")


@dataclass(frozen=True)
class Keeping:
    """What the console says of a run's worktree."""

    removed: bool
    until: datetime | None  # None: kept while the run goes on
    pushed: bool  # everything committed is pushed: removed at the next sweep


def keeping(run: Run) -> Keeping:
    if not run.workspace:
        return Keeping(removed=True, until=None, pushed=False)
    if run.status not in TERMINAL or run.finished_at is None:
        return Keeping(removed=False, until=None, pushed=False)
    pushed = run.status == RunStatus.DONE and _pushed_last(run.pk)
    until = run.finished_at + timedelta(days=settings.WORKTREE_DAYS)
    return Keeping(removed=False, until=until, pushed=pushed)


def sweep(now: datetime | None = None) -> list[int]:
    """Remove the worktrees past their keeping; the ids of the runs whose worktree went."""
    now = now or timezone.now()
    removed = []
    ended = Run.objects.exclude(workspace="").filter(status__in=TERMINAL, finished_at__isnull=False)
    for run in ended.only("pk", "status", "finished_at", "workspace", "input", "account_id"):
        state = keeping(run)
        if state.until is None or (state.until > now and not state.pushed):
            continue
        _remove(run)
        removed.append(run.pk)
    return removed


def _remove(run: Run) -> None:
    spec: Any = run.input if isinstance(run.input, dict) else {}
    workspace.remove_worktree(run.pk, str(spec.get("repository") or ""))
    # After the files: a crash in between leaves a path that names nothing, removed again next
    # time (removing is idempotent).
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(workspace="")
        journal.append_event("run.workspace_removed", run_id=run.pk, account_id=run.account_id)


def _pushed_last(run_id: int) -> bool:
    steps = Step.objects.filter(run_id=run_id).exclude(finished_at=None)
    last_write = steps.filter(name__in=WRITES).aggregate(seq=Max("seq"))["seq"] or 0
    for result in steps.filter(name="git_push", seq__gt=last_write).values_list(
        "result", flat=True
    ):
        if (
            isinstance(result, dict)
            and not result.get("is_error")
            and str(result.get("output", "")).startswith("Pushed ")
        ):
            return True
    return False
