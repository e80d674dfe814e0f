"""The journal's statements on the wire: prepared once per connection at the libpq level, sent
with their values encoded as text, on Django's own connection of this thread.

The ORM doubles the cost of a step (docs/design.md §20), and psycopg's cursor machinery still
costs two thirds of a step's own client time: `kernel.journal` and its debits send their
statements through `execute` here instead. A statement names its parameters `%(name)s`; each
name's type is declared in `_TYPE_OF`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import postgres, pq
from psycopg.types.json import Jsonb, JsonbLoader, JsonLoader

# One cursor per psycopg connection (connections are per thread), made once: the hot path
# should not rebuild a cursor and its adapters, nor enter Django's connection setup and error
# wrapping, twice per step.
# Django opens its connections with `prepare_threshold=None` (for transaction-mode poolers),
# which makes psycopg ignore `prepare=True`: every journal statement was parsed and planned
# again, ~0.3 ms each, more than the commit of a small step. A threshold no query reaches
# turns preparation back on for the statements that ask for it, and for them only.
EXPLICIT_PREPARES_ONLY = 1 << 30
_cursors: weakref.WeakKeyDictionary[psycopg.Connection[Any], psycopg.Cursor[Any]] = (
    weakref.WeakKeyDictionary()
)
_prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = (
    weakref.WeakKeyDictionary()
)  # the statements prepared on each
# This thread's Django connection wrapper and journal cursor, as last seen: `connection` is a
# proxy that resolves the thread's wrapper on every attribute (a few µs, twice per step).
_seen = threading.local()


def _cursor() -> psycopg.Cursor[Any]:
    """The journal's cursor on Django's connection of this thread (opened if needed)."""
    cursor: psycopg.Cursor[Any] | None = getattr(_seen, "cursor", None)
    # Still the raw connection the wrapper holds: not closed (or replaced) by Django since.
    if cursor is not None and _seen.wrapper.connection is cursor.connection and not cursor.closed:
        return cursor
    wrapper = connections[DEFAULT_DB_ALIAS]
    raw = wrapper.connection
    cursor = _cursors.get(raw) if raw is not None else None
    if cursor is None or cursor.closed:
        cursor = _new_cursor(wrapper)
    _seen.wrapper, _seen.cursor = wrapper, cursor
    _seen.prepared = _prepared.setdefault(cursor.connection, set())
    return cursor


def _new_cursor(wrapper: BaseDatabaseWrapper) -> psycopg.Cursor[Any]:
    wrapper.ensure_connection()
    raw = wrapper.connection
    if raw is None:
        raise RuntimeError("no database connection")
    if raw.prepare_threshold is None:
        raw.prepare_threshold = EXPLICIT_PREPARES_ONLY
    # psycopg's own Cursor (server-side binding, auto-prepared), not Django's ClientCursor.
    cursor = psycopg.Cursor(raw)
    # Django's backend loads json as text (its JSONField parses); the journal wants objects.
    cursor.adapters.register_loader("jsonb", JsonbLoader)
    cursor.adapters.register_loader("json", JsonLoader)
    _cursors[raw] = cursor
    return cursor


def query(sql: str, params: Any) -> psycopg.Cursor[Any]:
    """Run one statement, unprepared, on this thread's journal cursor (the rare paths); return
    it for the rows. Errors come out wrapped by Django (`IntegrityError`, `DatabaseError`, ...),
    as from any of its cursors."""
    cursor = _cursor()
    try:
        cursor.execute(sql, params, prepare=False)
    except psycopg.Error:
        with connection.wrap_database_errors:
            raise
    return cursor


# The hot path's statements skip psycopg's cursor: each is prepared once per connection at the
# libpq level, with its parameters' types declared here, and executed with its values already
# encoded as text. The cursor's machinery (a dumper looked up per value, the prepared-plan
# cache, the result's loaders) cost about 60 µs per statement, two thirds of a step's own
# client time. Each parameter's name says its type: a statement naming an undeclared one fails
# when first prepared.
_TYPE_OF = {
    **dict.fromkeys(("run", "fence", "account", "usd_micros", "tokens", "input_tokens",
                     "output_tokens", "cache_read_tokens", "cache_write_tokens",
                     "prior_age_us"), "int8"),
    **dict.fromkeys(("seq", "prior_seq", "executions", "prior_executions", "turns",
                     "tool_calls"), "int4"),
    **dict.fromkeys(("kind", "effect", "name", "hash", "settled_by", "prior_settled_by",
                     "wait_kind", "provider"), "text"),
    **dict.fromkeys(("request", "result", "prior_result", "question", "planned"), "jsonb"),
    "due_at": "timestamptz",
    "debit_ids": "int8[]",
}  # fmt: skip
_OID = {
    name: (postgres.types[name[:-2]].array_oid if name.endswith("[]") else postgres.types[name].oid)
    for name in set(_TYPE_OF.values())
}
# What the statements return, decoded by type (a new type fails loudly, not as bytes).
_DECODE: dict[int, Callable[[bytes], Any]] = {
    postgres.types["bool"].oid: lambda value: value == b"t",
    postgres.types["int2"].oid: int,
    postgres.types["int4"].oid: int,
    postgres.types["int8"].oid: int,
    postgres.types["json"].oid: json.loads,
    postgres.types["jsonb"].oid: json.loads,
    postgres.types["text"].oid: bytes.decode,
}


def _text(value: str) -> bytes:
    return value.encode()


def _integer(value: int) -> bytes:
    return b"%d" % value


def _json(value: Jsonb) -> bytes:
    text = (value.dumps or json.dumps)(value.obj)
    return text if isinstance(text, bytes) else text.encode()


def _moment(value: datetime) -> bytes:
    return value.isoformat().encode()


def _integers(value: list[int]) -> bytes:
    return ("{" + ",".join(str(int(item)) for item in value) + "}").encode()


# How a value of each declared type is sent, in text form: chosen once per statement and
# parameter, not by testing each value's type (13 values a step; that cascade of `isinstance`
# was the largest part of a step's own client time).
_ENCODER: dict[str, Callable[[Any], bytes]] = {
    "int4": _integer,
    "int8": _integer,
    "text": _text,
    "jsonb": _json,
    "timestamptz": _moment,
    "int8[]": _integers,
}


@dataclass(frozen=True)
class Statement:
    name: bytes
    text: bytes
    params: tuple[str, ...]  # the names, in $-number order
    types: tuple[int, ...]
    encoders: tuple[Callable[[Any], bytes], ...]

    def values(self, params: dict[str, Any]) -> list[bytes | None]:
        """`params` as PostgreSQL reads them in text form, in $-number order."""
        return [
            None if (value := params[name]) is None else encode(value)
            for name, encode in zip(self.params, self.encoders, strict=True)
        ]


@functools.cache
def _statement(sql: str) -> Statement:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    return Statement(
        name=f"agentos_journal_{hashlib.sha256(sql.encode()).hexdigest()[:16]}".encode(),
        text=text.encode(),
        params=tuple(names),
        types=tuple(_OID[_TYPE_OF[name]] for name in names),
        encoders=tuple(_ENCODER[_TYPE_OF[name]] for name in names),
    )


class Rows:
    """The rows of an executed statement, decoded, as a cursor would give them."""

    def __init__(self, result: pq.abc.PGresult) -> None:
        self._result = result

    def _row(self, index: int) -> tuple[Any, ...]:
        result = self._result
        values = []
        for column in range(result.nfields):
            value = result.get_value(index, column)
            values.append(None if value is None else _DECODE[result.ftype(column)](value))
        return tuple(values)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._row(0) if self._result.ntuples else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [self._row(index) for index in range(self._result.ntuples)]


_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


def execute(
    sql: str, params: dict[str, Any], *, prepare: bool = True
) -> Rows | psycopg.Cursor[Any]:
    """Run one journal statement on this thread's connection (see `_TYPE_OF`); return its rows.
    Without `prepare` (a statement run once per run, like the resume's read), one round trip
    that leaves no prepared statement behind.

    Errors come out wrapped by Django (`IntegrityError`, `DatabaseError`, ...), as from any of
    its cursors. In a transaction Django opened but psycopg has not begun yet, the statement
    goes through the cursor, which sends the `BEGIN`.
    """
    cursor = _cursor()
    raw = cursor.connection
    pgconn = raw.pgconn
    if not raw.autocommit and pgconn.transaction_status == pq.TransactionStatus.IDLE:
        return query(sql, params)
    statement = _statement(sql)
    values = statement.values(params)
    try:
        prepared: set[bytes] = _seen.prepared  # this connection's, as `_cursor` found it
        if prepare and statement.name not in prepared:
            _check(pgconn.prepare(statement.name, statement.text, statement.types), raw)
            prepared.add(statement.name)
        result = send(pgconn, statement, values, prepared=prepare)
        _check(result, raw)
    except psycopg.Error:
        with connection.wrap_database_errors:
            raise
    return Rows(result)


def send(
    pgconn: pq.abc.PGconn, statement: Statement, values: list[bytes | None], *, prepared: bool
) -> pq.abc.PGresult:
    """One round trip: the one place a journal statement reaches the server."""
    if prepared:
        # A None is a NULL there as in `exec_params`, whose declaration says so.
        return pgconn.exec_prepared(statement.name, values)  # type: ignore[arg-type]
    return pgconn.exec_params(statement.text, values, statement.types)


def _check(result: pq.abc.PGresult, raw: psycopg.Connection[Any]) -> None:
    if result.status not in _DONE:
        raise psycopg.errors.error_from_result(result, encoding=raw.info.encoding)
