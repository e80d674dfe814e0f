"""Periodic work of the agentos app (huey worker pool): thin wrappers around services."""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from agentos.backups import schedule
from agentos.core import idempotency


@db_periodic_task(crontab(minute="23", hour="*"))  # type: ignore[untyped-decorator]
def prune_idempotency_keys() -> None:
    """Forget Idempotency-Keys older than a day (hourly: a day is the promise, not a bound)."""
    idempotency.prune()


@db_periodic_task(crontab(minute="41", hour="2"))  # type: ignore[untyped-decorator]
def nightly_backup() -> None:
    """The nightly archive, when the owner turned it on (AGENTOS_BACKUP_NIGHTLY)."""
    schedule.nightly()
