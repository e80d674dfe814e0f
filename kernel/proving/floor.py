"""The benchmarks' floor: raw psycopg doing the journal's two commits per step on scratch tables
of the same shape, prepared, one round trip per commit (`kernel.proving.bench` and
`missions.proving.bench` set each figure next to it). Also what both sides are counted by:
`horizon`, the transaction ids taken, and `skip_wal_flush`, the disk taken out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from django.db import connection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from kernel import statements

RawConnection = psycopg.Connection[TupleRow]

# Scratch tables with the columns that cost: jsonb request and result, timestamps, the foreign
# key and the one-intent-per-seq unique index of kernel_step.
_CREATE = (
    "DROP TABLE IF EXISTS bench_step, bench_run",
    "CREATE TABLE bench_run (id bigint PRIMARY KEY, steps integer NOT NULL DEFAULT 0,"
    " updated_at timestamptz)",
    "CREATE TABLE bench_step (id bigserial PRIMARY KEY,"
    " run_id bigint NOT NULL REFERENCES bench_run (id), seq integer NOT NULL,"
    " kind varchar(20) NOT NULL, request jsonb NOT NULL, started_at timestamptz NOT NULL,"
    " result jsonb, finished_at timestamptz, UNIQUE (run_id, seq))",
)
_DROP = "DROP TABLE IF EXISTS bench_step, bench_run"
_EMPTY = "TRUNCATE bench_step, bench_run"

# Commit 1: the intent.
_FLOOR_INTENT = (
    "INSERT INTO bench_step (run_id, seq, kind, request, started_at)"
    " VALUES (%s, %s, 'checkpoint', %s, now())"
)
# Commit 2: the result and the run's state in one statement (one transaction, one round trip:
# the fewest a client can do for it, which is what makes it a floor).
_FLOOR_RESULT = (
    "WITH step AS (UPDATE bench_step SET result = %s, finished_at = now()"
    " WHERE run_id = %s AND seq = %s AND finished_at IS NULL RETURNING run_id)"
    " UPDATE bench_run SET steps = steps + 1, updated_at = now()"
    " WHERE id = (SELECT run_id FROM step)"
)


def raw_connect() -> RawConnection:
    """A psycopg connection of our own, to the database Django uses, in autocommit."""
    params = connection.get_connection_params()
    # Django's cursor factory (client-side binding) and adapters context are not the floor's.
    params.pop("cursor_factory", None)
    params.pop("context", None)
    # Django's `prepare_threshold=None` would make `prepare=True` a no-op: the floor prepares.
    params["prepare_threshold"] = statements.EXPLICIT_PREPARES_ONLY
    return psycopg.connect(**params, autocommit=True)


@contextmanager
def scratch_tables() -> Iterator[None]:
    with raw_connect() as conn:
        for statement in _CREATE:
            conn.execute(statement)
        try:
            yield
        finally:
            conn.execute(_DROP)


@dataclass
class FloorRun:
    """One floor "run": a bench_run row and its steps, written over one connection."""

    conn: RawConnection
    run_id: int
    seq: int = 0

    @classmethod
    def create(cls, conn: RawConnection, run_id: int) -> FloorRun:
        conn.execute("INSERT INTO bench_run (id) VALUES (%s)", (run_id,))
        return cls(conn, run_id)

    def step(self) -> None:
        self.seq += 1
        self.conn.execute(
            _FLOOR_INTENT, (self.run_id, self.seq, Jsonb({"i": self.seq})), prepare=True
        )
        self.conn.execute(_FLOOR_RESULT, (Jsonb(None), self.run_id, self.seq), prepare=True)

    def steps(self, count: int) -> None:
        for _ in range(count):
            self.step()


def skip_wal_flush(conn: RawConnection) -> None:
    """This session's commits stop waiting for their WAL flush: the disk out of the figure."""
    conn.execute("SET synchronous_commit TO off")


_HORIZON = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"


def horizon(conn: RawConnection) -> int:
    """The next transaction id PostgreSQL will give: its growth counts the database's commits
    of writing transactions, whoever made them (a read-only statement takes none)."""
    row = conn.execute(_HORIZON, prepare=True).fetchone()
    return int(row[0]) if row else 0


def empty(conn: RawConnection) -> None:
    """Each measurement starts from empty tables, so measurements compare alike."""
    conn.execute(_EMPTY)


def measure_floor_throughput(k: int, steps: int) -> float:
    """Steps/s of `k` threads, each a floor run on its own connection, started together."""
    with raw_connect() as conn:
        empty(conn)
    barrier = threading.Barrier(k + 1)

    def one(index: int) -> None:
        with raw_connect() as conn:
            run = FloorRun.create(conn, run_id=index + 1)
            run.step()  # prepares the statements: the floor is the steady state
            barrier.wait(timeout=60)
            run.steps(steps)

    with ThreadPoolExecutor(k) as pool:
        futures = [pool.submit(one, index) for index in range(k)]
        barrier.wait(timeout=60)
        started = time.perf_counter()
        for future in futures:
            future.result()
        elapsed = time.perf_counter() - started
    return k * steps / elapsed
