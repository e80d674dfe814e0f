"""huey tasks of the kernel: thin wrappers around kernel services."""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import HUEY, db_periodic_task

from kernel import workers


@HUEY.on_startup()  # type: ignore[untyped-decorator]  # huey ships no type hints
def announce_worker() -> None:
    """Each worker process reports as soon as it starts, not a minute later."""
    from django.db import close_old_connections

    close_old_connections()
    workers.record_beat(started=True)


@db_periodic_task(crontab(minute="*"))  # type: ignore[untyped-decorator]  # huey ships no hints
def heartbeat() -> None:
    """Runs through the queue, so a beat proves both the scheduler and a worker are alive."""
    workers.record_beat()
    workers.prune_beats()
