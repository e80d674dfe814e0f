"""Background and periodic work of the missions app, run by the huey worker pool."""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from missions import firing


@db_periodic_task(crontab(minute="*"))  # type: ignore[untyped-decorator]  # huey ships no hints
def fire_schedules() -> None:
    """Start the missions of the schedules due this minute."""
    firing.fire_due()
