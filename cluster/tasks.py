"""Periodic work of the cluster (huey worker pool): thin wrappers around services."""

from __future__ import annotations

from huey import crontab
from huey.contrib.djhuey import db_periodic_task

from cluster import nodes


@db_periodic_task(crontab(minute="*"))  # type: ignore[untyped-decorator]  # huey ships no hints
def refresh_nodes() -> None:
    """Every minute each enabled node's runner is asked `hello`: fresh telemetry for placement
    (`placement.FRESH_SECONDS`), a lost node seen back (its lost steps' fences raised there)."""
    nodes.refresh_all()
