"""The huey worker pool's queue, kept in PostgreSQL (no Redis).

huey's own `SqlStorage` (peewee, `FOR UPDATE SKIP LOCKED` claims) with two changes: its tables
live in a `huey` schema, created by migration `kernel.0001`, so they never clash with ours and
exist in every database Django migrates (test databases included); and a database that went
away is waited for. huey's consumer reads the queue and the schedule every second or two and
logs a traceback each time a read fails: while the database is unreachable, reads answer
"nothing to do" instead, touch the database only when the backoff says so, and say so once
(`agentos.core.reachability`). Nothing is lost: a failed read committed nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from huey.api import Huey
from huey.contrib.sql_huey import SqlStorage
from peewee import PostgresqlDatabase

from agentos.core import database, reachability

SCHEMA = "huey"


class PostgresStorage(SqlStorage):  # type: ignore[misc]  # huey ships no type hints
    def __init__(self, name: str = "huey", database: Any = None, **kwargs: Any) -> None:
        if isinstance(database, str):
            database = peewee_database(database)
        # Tables come from migrations; peewee must not create them in `public` on import.
        super().__init__(name=name, database=database, create_tables=False, **kwargs)
        self.backoff = reachability.Backoff()
        self.retry_at = 0.0

    def create_models(self) -> tuple[Any, ...]:
        models: tuple[Any, ...] = super().create_models()
        for model in models:
            model._meta.schema = SCHEMA
        return models

    def dequeue(self) -> Any:
        return self._read(super().dequeue, None)

    def read_schedule(self, timestamp: Any) -> Any:
        return self._read(lambda: super(PostgresStorage, self).read_schedule(timestamp), [])

    def _read(self, read: Any, nothing: Any) -> Any:
        if time.monotonic() < self.retry_at:
            return nothing
        try:
            found = read()
        except Exception as error:
            if not reachability.is_unreachable(error):
                raise
            reachability.went_away(error, where="task queue")
            with contextlib.suppress(Exception):  # the connection is broken: drop it
                self.database.close()
            self.retry_at = time.monotonic() + self.backoff.next_delay()
            return nothing
        if self.retry_at:
            self.retry_at = 0.0
            self.backoff.reset()
            reachability.came_back()
        return found


def peewee_database(url: str) -> PostgresqlDatabase:
    """The queue's connection, read from `DATABASE_URL` as Django reads it: peewee's own URL
    parser leaves the password %-escaped, so a password with `@`, `:` or `/` (escaped in the
    URL, as it must be) would be refused."""
    entry = database.parse_url(url)
    return PostgresqlDatabase(
        entry["NAME"],
        host=entry["HOST"] or None,
        port=int(entry["PORT"]) if entry["PORT"] else None,
        user=entry["USER"] or None,
        password=entry["PASSWORD"] or None,
        **entry["OPTIONS"],
    )


class QuietWhileUnreachable(logging.Filter):
    """huey logs a traceback when its scheduler cannot enqueue a periodic task, or a task meets
    the database gone: while it is unreachable, `agentos.core.reachability` says so once
    instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and reachability.is_unreachable(error):
            reachability.went_away(error, where="task queue")
            return False
        return True


# The scheduler's and the task runner's loggers (huey names them so); a logger's filter sees
# the records logged on it.
for _name in ("huey", "huey.consumer.Scheduler"):
    logging.getLogger(_name).addFilter(QuietWhileUnreachable())


class PostgresHuey(Huey):  # type: ignore[misc]  # huey ships no type hints
    storage_class = PostgresStorage
