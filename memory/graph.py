"""The vector index (`memory_note_embedding`, migration 0007) dropped and built again around
the statements of a transaction that give many rows a vector: an HNSW graph built at once costs
far less than the same rows inserted into it one by one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from memory.progress import Progress

INDEX = "memory_note_embedding"
# From this many rows given a vector in one transaction, and a quarter of those the index will
# hold, it is dropped and built again after them rather than grown by each row. At 100,000
# notes, a row inserted into the graph cost 17 ms; the graph built at once, 1.3 ms per row of
# the table (`manage.py bench_reindex`). The build holds the table: every scope's searches and
# writes wait for the transaction's end (about 2 minutes at 100,000 notes).
REBUILT_FROM = 10_000
PHASE = "building the vector graph (searches and writes wait for it)"


@contextlib.contextmanager
def built_after(writing: int, progress: Progress | None = None) -> Iterator[None]:
    """Around the statements of the caller's transaction that give `writing` rows a vector:
    when they are many (see `REBUILT_FROM`), the vector index dropped before them and built again
    after them (a process killed before the commit leaves it as it was); else nothing."""
    progress = progress or Progress.quiet()
    with connection.cursor() as cursor:
        definition = _graph_dropped(cursor, writing)
    try:
        yield
    except BaseException:
        if definition:  # never committed without its index, whatever the caller catches
            transaction.set_rollback(True)
        raise
    if not definition:
        return
    progress.phase(PHASE, 1)
    with connection.cursor() as cursor:
        # In memory when it fits (about 200 MB at 100,000 notes): several times faster.
        cursor.execute("SET LOCAL maintenance_work_mem = '512MB'")
        # An index is not built over rows whose foreign keys are still to check: checked now,
        # then deferred again to the commit, as Django declares every one of them.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(definition)
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    progress.advance()


def _graph_dropped(cursor: CursorWrapper, writing: int) -> str:
    """The vector index dropped if `writing` rows are at least `REBUILT_FROM` and a
    quarter of those it will hold: its definition, to build it again; else ""."""
    if writing < REBUILT_FROM or not connection.in_atomic_block:
        return ""
    cursor.execute("SELECT count(*) FROM memory_note WHERE embedding IS NOT NULL")
    (held,) = cursor.fetchone()
    cursor.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = %s",
        [INDEX],
    )
    found = cursor.fetchone()
    if found is None or 4 * writing < held + writing:
        return ""
    cursor.execute(f"DROP INDEX {INDEX}")
    definition: str = found[0]
    return definition
