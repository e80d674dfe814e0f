"""Forking a run from a recorded step, as the console and the API offer it.

A run that worked on a repository forks from its worktree: the fork's files are the source's
as they were after the chosen step (a checkpoint of that worktree, docs/design.md §12). Once the
sweep removed that worktree (`tools.retention`), its journal stays but its files are gone, and a
fork could only fail on its first step after the owner was told it was started. So it is refused
here, before anything is queued, and the run page offers no fork link. (Rebuilding the files
from the journal's recorded commits would need the source's staging refs, which the sweep
removes with the worktree.)
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from kernel import runs
from kernel.models import Run
from missions.errors import MissionError


def worktree_gone(run: Run) -> bool:
    """Whether `run` worked on a repository whose worktree is no longer there (swept, or never
    made): its steps cannot be forked."""
    spec: Any = run.input if isinstance(run.input, dict) else {}
    return bool(spec.get("repository")) and not run.workspace


def fork(run_id: int, *, at_seq: int, by: str = "owner") -> Run:
    """`kernel.runs.fork_run`, refused with 409 `worktree_removed` when the fork would have no
    files to start from."""
    source = Run.objects.filter(pk=run_id).only("pk", "input", "workspace").first()
    if source is not None and worktree_gone(source):
        raise MissionError(
            _(
                "Run %(run)s cannot be forked: its worktree was removed, so no fork can start"
                " from its files (its journal stays). Relaunch the mission instead."
            )
            % {"run": run_id},
            code="worktree_removed",
            status=409,
        )
    return runs.fork_run(run_id, at_seq=at_seq, by=by)
