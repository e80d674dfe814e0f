"""Periodic work of the tools app, run by the huey worker pool."""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from tools import retention


@db_periodic_task(crontab(minute="41", hour="*"))  # type: ignore[untyped-decorator]  # huey ships no hints
def sweep_worktrees() -> None:
    """Remove the worktrees past their keeping (hourly: days are the promise, not a bound)."""
    retention.sweep()
