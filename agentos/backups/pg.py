"""PostgreSQL for backups: the bundled client programs, one snapshot for the dump and the
checksums, the per-table checksums `--verify` compares, and a scratch database to restore into.

The programs are pgserver's (PostgreSQL 16), for the embedded server and a `DATABASE_URL` alike:
a server of another major version needs its own pg_dump (docs/operations.md says so).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import psycopg
from django.conf import settings
from psycopg import sql

from agentos.core import database

# Not the tables' contents: who holds a lease now, and the queue's doorbell bookkeeping.
TABLES = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
ORDER BY 1, 2
"""


def binary(name: str) -> str:
    from pgserver._commands import POSTGRES_BIN_PATH  # heavy: only a backup needs it

    return str(Path(POSTGRES_BIN_PATH) / name)


def entry(name: str | None = None) -> dict[str, Any]:
    """The default database's settings, another database's name on the same server if given."""
    found = dict(settings.DATABASES["default"])
    if name:
        found["NAME"] = name
    return found


def url(name: str | None = None) -> str:
    """A URL without the password (argv is visible to every user): `environment()` has it."""
    return database.build_url({**entry(name), "PASSWORD": ""})


def environment() -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PGTZ": "UTC"}
    password = entry().get("PASSWORD")
    if password:
        env["PGPASSWORD"] = str(password)
    return env


def connect(name: str | None = None, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    found = entry(name)
    return psycopg.connect(
        dbname=found["NAME"],
        user=found["USER"] or None,
        password=found.get("PASSWORD") or None,
        host=found["HOST"] or None,
        port=found["PORT"] or None,
        autocommit=autocommit,
        **(found.get("OPTIONS") or {}),
    )


@contextmanager
def snapshot() -> Iterator[tuple[psycopg.Connection[Any], str]]:
    """A repeatable-read transaction and its exported snapshot id: `pg_dump --snapshot` dumps
    exactly what the checksums taken in it saw, however long the files take in between."""
    with connect() as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        conn.execute("SET TimeZone = 'UTC'")
        (snapshot_id,) = _one(conn.execute("SELECT pg_export_snapshot()").fetchone())
        yield conn, str(snapshot_id)
        conn.rollback()


def checksums(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    """Each table's row count and the md5 of its rows' md5s in a fixed order: equal on a
    faithful copy, whatever the physical order of the rows."""
    conn.execute("SET TimeZone = 'UTC'")
    found: dict[str, dict[str, Any]] = {}
    for schema, table in conn.execute(TABLES).fetchall():
        query = sql.SQL(
            "SELECT count(*), coalesce(md5(string_agg(h, '' ORDER BY h)), '') FROM"
            ' (SELECT md5(t::text) COLLATE "C" AS h FROM {}.{} t) s'
        ).format(sql.Identifier(schema), sql.Identifier(table))
        rows, digest = _one(conn.execute(query).fetchone())
        found[f"{schema}.{table}"] = {"rows": int(rows), "md5": str(digest)}
    return found


def _one(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    if row is None:
        raise RuntimeError("PostgreSQL returned no row for an aggregate.")
    return row


def dump(snapshot_id: str, errors: IO[bytes]) -> subprocess.Popen[bytes]:
    """`pg_dump` of the whole database in the snapshot, custom format, on its stdout; its
    messages into `errors` (a file: a pipe left unread could fill and stall it)."""
    return subprocess.Popen(  # noqa: S603  # our bundled binary, an argv list
        [
            binary("pg_dump"),
            "--format=custom",
            "--no-owner",
            "--no-privileges",
            f"--snapshot={snapshot_id}",
            f"--dbname={url()}",
        ],
        stdout=subprocess.PIPE,
        stderr=errors,
        env=environment(),
    )


def restore_into(name: str | None, errors: IO[bytes]) -> subprocess.Popen[bytes]:
    """`pg_restore` reading a custom-format dump on its stdin, in one transaction."""
    return subprocess.Popen(  # noqa: S603  # our bundled binary, an argv list
        [
            binary("pg_restore"),
            "--no-owner",
            "--no-privileges",
            "--single-transaction",
            "--exit-on-error",
            f"--dbname={url(name)}",
        ],
        stdin=subprocess.PIPE,
        stderr=errors,
        env=environment(),
    )


def tables_in(name: str | None = None) -> int:
    """How many tables the database holds outside the system schemas (0: empty)."""
    with connect(name) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_tables"
            " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def scratch_database() -> Iterator[str]:
    """A new, empty database on the same server, dropped after (even on failure)."""
    name = f"agentos_verify_{os.getpid()}_{os.urandom(4).hex()}"
    with connect(autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with connect(autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
