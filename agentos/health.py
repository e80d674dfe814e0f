"""What is up: database, migrations, worker pool. Unknown is reported as unknown, never guessed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import DatabaseError
from django.utils import timezone

from agentos.core import reachability
from kernel import heartbeats

logger = logging.getLogger(__name__)

State = Literal["up", "down", "stale", "unknown", "applied", "pending"]


@dataclass(frozen=True)
class Component:
    state: State
    detail: str
    since: datetime | None = None  # the fact's own time (last beat), when it has one


@dataclass(frozen=True)
class Health:
    ok: bool
    checked_at: datetime
    database: Component
    migrations: Component
    workers: Component


def check() -> Health:
    now = timezone.now()
    database = _database()
    if database.state != "up":
        unknown = Component("unknown", "the database is unreachable")
        return Health(False, now, database, unknown, unknown)
    migrations = _migrations()
    pool = _workers()
    ok = migrations.state == "applied" and pool.state == "up"
    return Health(ok, now, database, migrations, pool)


def _database() -> Component:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT current_setting('server_version')")
            (version,) = cursor.fetchone() or ("?",)
    except DatabaseError as error:
        logger.warning("health: database unreachable: %s", error)
        if reachability.is_disk_full(error):
            return Component("down", "the disk is full")
        if reachability.is_unreachable(error):
            return Component("down", "the database is unreachable")
        return Component("down", f"unreachable: {error.__class__.__name__}")
    return Component("up", f"PostgreSQL {version}")


# Once every migration this code knows is applied, it stays so for the life of the process
# (new migrations come with new code, hence a restart): skip re-reading the migration graph.
_all_applied = False


def _migrations() -> Component:
    global _all_applied
    if _all_applied:
        return Component("applied", "all migrations applied")
    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        logger.warning("health: cannot read migration state: %s", error)
        return Component("unknown", "migration state unreadable")
    if plan:
        return Component("pending", f"{len(plan)} migration(s) not applied")
    _all_applied = True
    return Component("applied", "all migrations applied")


def _workers() -> Component:
    try:
        status = heartbeats.pool_status()
    except DatabaseError as error:
        logger.warning("health: cannot read worker beats: %s", error)
        return Component("unknown", "worker beats unreadable")
    if status.state == "unknown":
        return Component("unknown", "no worker has reported yet")
    if status.state == "stale":
        return Component("stale", "no worker beat recently", status.last_beat_at)
    # Against the configured pool size: "1 of 2" tells the owner a worker is missing.
    detail = f"{status.live_workers} of {settings.HUEY_WORKERS} workers live"
    return Component("up", detail, status.last_beat_at)
