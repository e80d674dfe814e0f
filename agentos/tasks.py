"""Periodic work of the agentos app (huey worker pool): thin wrappers around services."""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from agentos.core import idempotency


@db_periodic_task(crontab(minute="23", hour="*"))  # type: ignore[untyped-decorator]
def prune_idempotency_keys() -> None:
    """Forget Idempotency-Keys older than a day (hourly: a day is the promise, not a bound)."""
    idempotency.prune()
