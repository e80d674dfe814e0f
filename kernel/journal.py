"""The journal: the only writer of step intents, step results and (with `append_event`) events.

Steps announce themselves in the event stream without a write of their own: each intent takes
its `step.started` event id (a column default) and each result its `step.completed` id
(`finished_event` below), with the writing transaction, and the sequencer derives the events from
the step rows (migration 0018, `kernel.stream`). Waits opened with an intent still announce
themselves through a trigger (0010).

Hot path (one run's steps) is two single-statement transactions per step, each fenced:

1. intent: `INSERT` the step, in the same statement as a `FOR SHARE` lock on the run row held
   only if the run's fence still equals the caller's token (a claim, which bumps the fence, waits
   for it, so a zombie's intent can never land after a takeover);
2. result: `UPDATE` the step (only if it has no result yet) and, when the step cost anything or
   counts as a turn or tool call, debit the run, its ancestors, its account and the day, all in
   that same statement.

Statements go straight to psycopg with server-side binding and prepared plans (the ORM doubles
the cost of a step: docs/design.md §20). Zero rows means the fence
moved: `LeaseLost`, nothing written.
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
from json.encoder import (  # type: ignore[attr-defined]  # C helpers, not in typeshed
    c_make_encoder,
    encode_basestring_ascii,
)
from typing import Any, NamedTuple

import psycopg
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from psycopg import postgres, pq
from psycopg.types.json import Jsonb, JsonbLoader, JsonLoader

from agentos.scrubber import scrub_json, scrub_value
from kernel.budgets import Cost, Ledger
from kernel.exceptions import KernelError, LeaseLost
from kernel.models import Effect, Event, StepKind, Trust

KINDS = frozenset(StepKind.values)
EFFECTS = frozenset(Effect.values)


@dataclass(frozen=True)
class Fence:
    """The right to write for one run: its id and the token of the claim that gave it."""

    run_id: int
    token: int


class Record(NamedTuple):
    """One step as the journal holds it (a tuple: a resume makes one per recorded step)."""

    seq: int
    kind: str
    effect: str
    name: str
    request_hash: str
    result: Any
    finished: bool
    settled_by: str


@dataclass(frozen=True)
class Debit:
    """Totals after a debit: per debited run (subtree totals), the account's, and today's spend."""

    runs: dict[int, Ledger]
    account: Ledger | None
    day_usd_micros: int | None


def as_stored(value: Any) -> Any:
    """`value` as the journal will give it back: object keys in jsonb's order (shorter keys
    first, then by their bytes), which is not the order they were written in. A program that
    serialises a live result (the engine sends a model's answer back to it) produces then the
    same bytes as after a replay."""
    if isinstance(value, dict):
        ordered = sorted(value, key=lambda key: (len(key.encode()), key.encode()))
        return {key: as_stored(value[key]) for key in ordered}
    if isinstance(value, list):
        return [as_stored(item) for item in value]
    return value


def _hash_encoder() -> Callable[[Any], str]:
    """`json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)`, byte for byte.

    The hash is taken for every step, and again for every step a resume replays (most of a
    replay's own time): `json.dumps` with options builds an encoder, and the C encoder under it,
    per call. This one is built once. Without circular-reference markers: a request is a tree.
    """
    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
    if c_make_encoder is None:  # a Python without the C accelerator
        return encoder.encode
    c_encode = c_make_encoder(None, str, encode_basestring_ascii, None, ":", ",", True, False, True)
    return lambda value: "".join(c_encode(value, 0))


_encode_for_hash = _hash_encoder()


def request_hash(kind: str, name: str, request: Any) -> str:
    return hashlib.sha256(_encode_for_hash([kind, name, request]).encode()).hexdigest()


def idempotency_key(run_id: int, seq: int) -> str:
    """`hash(run_id, seq)`: the key an idempotent executor uses to find its earlier result.

    Computed, never stored (migration 0019): a step row is written twice per step."""
    return hashlib.sha256(f"agentos-step:{run_id}:{seq}".encode()).hexdigest()


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


def _query(sql: str, params: Any) -> psycopg.Cursor[Any]:
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
                     "output_tokens", "cache_read_tokens", "cache_write_tokens"), "int8"),
    **dict.fromkeys(("seq", "prior_seq", "executions", "prior_executions", "turns",
                     "tool_calls"), "int4"),
    **dict.fromkeys(("kind", "effect", "name", "hash", "settled_by", "prior_settled_by",
                     "wait_kind"), "text"),
    **dict.fromkeys(("request", "result", "prior_result", "question", "planned"), "jsonb"),
    **dict.fromkeys(("prior_finished_at", "due_at"), "timestamptz"),
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


@dataclass(frozen=True)
class _Statement:
    name: bytes
    text: bytes
    params: tuple[str, ...]  # the names, in $-number order
    types: tuple[int, ...]


@functools.cache
def _statement(sql: str) -> _Statement:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    return _Statement(
        name=f"agentos_journal_{hashlib.sha256(sql.encode()).hexdigest()[:16]}".encode(),
        text=text.encode(),
        params=tuple(names),
        types=tuple(_OID[_TYPE_OF[name]] for name in names),
    )


def _encoded(value: Any) -> bytes | None:
    """`value` as PostgreSQL reads it in text form."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return b"%d" % value
    if isinstance(value, Jsonb):
        text = (value.dumps or json.dumps)(value.obj)
        return text if isinstance(text, bytes) else text.encode()
    if isinstance(value, datetime):
        return value.isoformat().encode()
    if isinstance(value, list):
        return ("{" + ",".join(str(int(item)) for item in value) + "}").encode()
    raise TypeError(f"no text form for a journal parameter of type {type(value).__name__}")


class _Rows:
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


_prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = (
    weakref.WeakKeyDictionary()
)
_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


def _execute(
    sql: str, params: dict[str, Any], *, prepare: bool = True
) -> _Rows | psycopg.Cursor[Any]:
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
        return _query(sql, params)
    statement = _statement(sql)
    values = [_encoded(params[name]) for name in statement.params]
    try:
        prepared = _prepared.setdefault(raw, set())
        if prepare and statement.name not in prepared:
            _check(pgconn.prepare(statement.name, statement.text, statement.types), raw)
            prepared.add(statement.name)
        result = _send(pgconn, statement, values, prepared=prepare)
        _check(result, raw)
    except psycopg.Error:
        with connection.wrap_database_errors:
            raise
    return _Rows(result)


def _send(
    pgconn: pq.abc.PGconn, statement: _Statement, values: list[bytes | None], *, prepared: bool
) -> pq.abc.PGresult:
    """One round trip: the one place a journal statement reaches the server."""
    if prepared:
        # A None is a NULL there as in `exec_params`, whose declaration says so.
        return pgconn.exec_prepared(statement.name, values)  # type: ignore[arg-type]
    return pgconn.exec_params(statement.text, values, statement.types)


def _check(result: pq.abc.PGresult, raw: psycopg.Connection[Any]) -> None:
    if result.status not in _DONE:
        raise psycopg.errors.error_from_result(result, encoding=raw.info.encoding)


# The whole journal of a run as one JSON document: one value to decode instead of a row and a
# JSON result per step (a 1,000-step resume spent more time decoding rows than reading them).
# A result comes out in jsonb's key order, as it would column by column (`as_stored`).
_LOAD = """
SELECT coalesce(json_agg(json_build_array(seq, kind, effect, name, request_hash, result,
    finished_at IS NOT NULL, settled_by) ORDER BY seq), '[]')
FROM kernel_step WHERE run_id = %(run)s
"""


def load(run_id: int) -> dict[int, Record]:
    """Every step of a run, in one query (resume reads the journal once, not per step)."""
    row = _execute(_LOAD, {"run": run_id}, prepare=False).fetchone()
    return {step[0]: Record(*step) for step in (row[0] if row else [])}


# Also returns the run's `wake_pending` flag (read from the row it locks anyway): whether
# something (an owner message, a child's end) arrived while the run executes.
_INTENT = """
WITH fenced AS (
    SELECT id, wake_pending FROM kernel_run
    WHERE id = %(run)s AND fence = %(fence)s FOR SHARE)
INSERT INTO kernel_step (run_id, seq, kind, effect, name, request, request_hash, idempotency_key,
    started_at, settled_by, executions, input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens, usd_micros)
SELECT id, %(seq)s, %(kind)s, %(effect)s, %(name)s, %(request)s, %(hash)s, '', now(), '',
    0, 0, 0, 0, 0, 0
FROM fenced
RETURNING (SELECT wake_pending FROM fenced)
"""

# The same, also recording the result of the step before it: a free read whose result the
# context held back (`Deferred`) rides on this statement instead of taking its own round trip.
# Both are fenced by the same lock; the intent never commits without that result.
_INTENT_AFTER_DEFERRED = _INTENT.replace(
    "FOR SHARE)\nINSERT INTO kernel_step",
    """FOR SHARE),
prior AS (
    UPDATE kernel_step SET result = %(prior_result)s, finished_at = %(prior_finished_at)s,
        finished_event = nextval('kernel_event_id_seq'), finished_tx = pg_current_xact_id(),
        settled_by = %(prior_settled_by)s, executions = executions + %(prior_executions)s
    WHERE run_id = %(run)s AND seq = %(prior_seq)s AND finished_at IS NULL
        AND EXISTS (SELECT 1 FROM fenced)
    RETURNING id)
INSERT INTO kernel_step""",
    1,
).replace(
    # Read `prior` before inserting: it then runs first, and the event id its row takes (the
    # read's `step.completed`) comes before the new intent's `step.started`.
    "FROM fenced\nRETURNING",
    "FROM fenced, (SELECT count(*) FROM prior) AS recorded_first\nRETURNING",
)


@dataclass(frozen=True)
class Deferred:
    """The result of a free, replayable step not written yet: it goes with the next intent.

    Losing it in a crash is what an asynchronous commit already allows for these steps: the
    step has an intent and no result, so it runs again (a read).
    """

    seq: int
    result: Any
    settled_by: str
    executions: int
    finished_at: datetime  # when the step ended, not when its result is written


# A held-back result written on its own (before a write that cannot carry it), async commit.
_DEFERRED = """
WITH fenced AS (SELECT id FROM kernel_run WHERE id = %(run)s AND fence = %(fence)s FOR SHARE)
UPDATE kernel_step SET result = %(prior_result)s, finished_at = %(prior_finished_at)s,
    finished_event = nextval('kernel_event_id_seq'), finished_tx = pg_current_xact_id(),
    settled_by = %(prior_settled_by)s, executions = executions + %(prior_executions)s
WHERE run_id = %(run)s AND seq = %(prior_seq)s AND finished_at IS NULL
    AND EXISTS (SELECT 1 FROM fenced) AND set_config('synchronous_commit', 'off', true) = 'off'
RETURNING id
"""


def _as_is(text: str) -> str:
    return text


def _scrubbed(result: Any) -> Jsonb:
    """A result as the journal stores it. What a tool printed may hold a secret; the journal
    (read back by models, the console, memory) never keeps it. A clean result costs one JSON
    encoding, used both to look for secrets and as the value sent (`secrets.scrub_json`)."""
    return Jsonb(scrub_json(result), dumps=_as_is)


def _prior_params(prior: Deferred) -> dict[str, Any]:
    return {
        "prior_seq": prior.seq,
        "prior_result": _scrubbed(prior.result),
        "prior_settled_by": prior.settled_by,
        "prior_executions": prior.executions,
        "prior_finished_at": prior.finished_at,
    }


def record_deferred(fence: Fence, prior: Deferred) -> None:
    """Write a held-back result now (see `Deferred`)."""
    params = {"run": fence.run_id, "fence": fence.token, **_prior_params(prior)}
    if _execute(_DEFERRED, params).fetchone() is None:
        _explain_refused_result(fence, prior.seq)


_INTENT_WITH_WAIT = """
WITH fenced AS (SELECT id FROM kernel_run WHERE id = %(run)s AND fence = %(fence)s FOR SHARE),
step AS (
    INSERT INTO kernel_step (run_id, seq, kind, effect, name, request, request_hash,
        idempotency_key, started_at, settled_by, executions, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens, usd_micros)
    SELECT id, %(seq)s, %(kind)s, %(effect)s, %(name)s, %(request)s, %(hash)s, '', now(),
        '', 0, 0, 0, 0, 0, 0
    FROM fenced
    RETURNING run_id)
INSERT INTO kernel_wait (run_id, seq, kind, state, question, due_at, created_at)
SELECT run_id, %(seq)s, %(wait_kind)s, 'open', %(question)s, %(due_at)s, now() FROM step
RETURNING id
"""


def record_intent(
    fence: Fence,
    *,
    seq: int,
    kind: str,
    effect: str,
    name: str,
    request: Any,
    wait: tuple[str, Any, datetime | None] | None = None,
    prior: Deferred | None = None,
) -> bool:
    """Commit the intent of step `seq` (and, for a wait step, its wait row) before it runs;
    with `prior`, the held-back result of the step before it, in the same statement.

    Returns whether a wake-up arrived for the run since it was claimed (see `_INTENT`).
    """
    if kind not in KINDS:
        raise KernelError(f"Unknown step kind {kind!r}; expected one of {sorted(KINDS)}.")
    if effect not in EFFECTS:
        raise KernelError(f"Unknown effect class {effect!r}; expected one of {sorted(EFFECTS)}.")
    params: dict[str, Any] = {
        "run": fence.run_id,
        "fence": fence.token,
        "seq": seq,
        "kind": kind,
        "effect": effect,
        "name": name,
        "request": Jsonb(request),
        "hash": request_hash(kind, name, request),
    }
    sql = _INTENT
    if prior is not None:
        if wait is not None:
            raise KernelError("A wait's intent does not carry a deferred result.")
        sql = _INTENT_AFTER_DEFERRED
        params.update(_prior_params(prior))
    elif wait is not None:
        sql = _INTENT_WITH_WAIT
        params["wait_kind"], question, params["due_at"] = wait
        params["question"] = Jsonb(question)
    try:
        written = _execute(sql, params).fetchone()
    except IntegrityError:
        raise KernelError(
            f"Step {seq} of run {fence.run_id} already has an intent.", code="duplicate_intent"
        ) from None
    if written is None:
        raise LeaseLost(f"run {fence.run_id}: fence {fence.token} is stale")
    return bool(written[0]) if wait is None else True


# The result of a step that cost nothing (one that did goes with its debit, below): its cost
# columns keep the zeros of its intent.
_RESULT = """
WITH fenced AS (SELECT id FROM kernel_run WHERE id = %(run)s AND fence = %(fence)s FOR SHARE)
UPDATE kernel_step SET result = %(result)s, finished_at = now(), settled_by = %(settled_by)s,
    finished_event = nextval('kernel_event_id_seq'), finished_tx = pg_current_xact_id(),
    executions = executions + %(executions)s
WHERE run_id = %(run)s AND seq = %(seq)s AND finished_at IS NULL
    AND EXISTS (SELECT 1 FROM fenced)
RETURNING id
"""

# The result of a free, replayable step (a `read`, or a settled wait) commits without waiting for
# its WAL flush: if the database crashed before the flush, the step would simply be replayed.
# `set_config(..., true)` in the statement applies to this statement's own transaction, and the
# next intent's (synchronous) commit flushes this record along with its own.
_RESULT_REPLAYABLE = _RESULT.replace(
    "AND EXISTS (SELECT 1 FROM fenced)",
    "AND EXISTS (SELECT 1 FROM fenced) AND set_config('synchronous_commit', 'off', true) = 'off'",
)

# The same, plus the ledger: the run and its ancestors (ascending ids, so concurrent debits of
# one tree lock rows in one order), and, only when needed, the account's totals (when it has
# caps) and today's global spend (when the step cost something). Each part is paid per step,
# so a statement has only the parts its step needs.
_DEBIT_RUNS = """
WITH fenced AS (SELECT id FROM kernel_run WHERE id = %(run)s AND fence = %(fence)s FOR SHARE),
step AS (
    UPDATE kernel_step SET result = %(result)s, finished_at = now(), settled_by = %(settled_by)s,
        finished_event = nextval('kernel_event_id_seq'), finished_tx = pg_current_xact_id(),
        executions = executions + %(executions)s, input_tokens = %(input_tokens)s,
        output_tokens = %(output_tokens)s, cache_read_tokens = %(cache_read_tokens)s,
        cache_write_tokens = %(cache_write_tokens)s, usd_micros = %(usd_micros)s
    WHERE run_id = %(run)s AND seq = %(seq)s AND finished_at IS NULL
        AND EXISTS (SELECT 1 FROM fenced){async_commit}
    RETURNING id),
runs AS (
    UPDATE kernel_run SET input_tokens = input_tokens + %(input_tokens)s,
        output_tokens = output_tokens + %(output_tokens)s,
        cache_read_tokens = cache_read_tokens + %(cache_read_tokens)s,
        cache_write_tokens = cache_write_tokens + %(cache_write_tokens)s,
        usd_micros = usd_micros + %(usd_micros)s, turns = turns + %(turns)s,
        tool_calls = tool_calls + %(tool_calls)s,
        billed_through = CASE WHEN id = %(run)s THEN %(seq)s ELSE billed_through END
    WHERE id = ANY(%(debit_ids)s) AND EXISTS (SELECT 1 FROM step){returning})"""

# The debited runs' new totals and caps, for the meter to check; not asked for when no run of
# the tree has a cap (`Meter.tree_capped`): nothing to check them against.
_LEDGERS = """
    RETURNING id, input_tokens + output_tokens + cache_read_tokens + cache_write_tokens AS tokens,
        usd_micros, turns, tool_calls, max_tokens, max_usd_micros, max_turns, max_tool_calls"""

# An account's totals are the sum of its root runs (whose ledgers count their subtrees); this
# statement's own debit is not visible to that sum yet, hence the added deltas.
_DEBIT_ACCOUNT = """,
account AS (
    SELECT sum(r.input_tokens + r.output_tokens + r.cache_read_tokens + r.cache_write_tokens)
            + %(tokens)s AS spent_tokens,
        sum(r.usd_micros) + %(usd_micros)s AS spent_usd_micros,
        sum(r.turns) + %(turns)s AS spent_turns,
        sum(r.tool_calls) + %(tool_calls)s AS spent_tool_calls,
        a.max_tokens, a.max_usd_micros, a.max_turns, a.max_tool_calls
    FROM kernel_account a JOIN kernel_run r ON r.account_id = a.id AND r.parent_id IS NULL
    WHERE a.id = %(account)s AND EXISTS (SELECT 1 FROM step)
    GROUP BY a.id)"""

_DEBIT_DAY = """,
day AS (
    INSERT INTO kernel_dailyspend (day, usd_micros, tokens)
    SELECT (now() AT TIME ZONE 'UTC')::date, %(usd_micros)s, %(tokens)s
    WHERE EXISTS (SELECT 1 FROM step)
    ON CONFLICT (day) DO UPDATE SET usd_micros = kernel_dailyspend.usd_micros + EXCLUDED.usd_micros,
        tokens = kernel_dailyspend.tokens + EXCLUDED.tokens
    RETURNING usd_micros)"""


# The intents of the read steps a result already names (the tool calls a model asked for), in
# the same transaction as that result: one commit less per turn. Only reads, where an intent
# recorded for a step that then never ran costs nothing on replay (a non-idempotent step would
# send its owner a needless "did it happen?").
_PLANNED = """,
planned AS (
    INSERT INTO kernel_step (run_id, seq, kind, effect, name, request, request_hash,
        idempotency_key, started_at, settled_by, executions, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens, usd_micros)
    SELECT %(run)s, p.seq, p.kind, 'read', p.name, p.request, p.hash, '', now(), '', 0, 0, 0,
        0, 0, 0
    FROM jsonb_to_recordset(%(planned)s)
        AS p(seq integer, kind text, name text, request jsonb, hash text)
    WHERE EXISTS (SELECT 1 FROM step))"""


@functools.cache
def _debit_sql(
    *, account: bool, day: bool, replayable: bool, planned: bool = False, ledgers: bool = True
) -> str:
    async_commit = " AND set_config('synchronous_commit', 'off', true) = 'off'"
    # Assembled from constant parts only; every value travels as a bound parameter.
    return (
        _DEBIT_RUNS.format(  # noqa: S608
            async_commit=async_commit if replayable else "",
            returning=_LEDGERS if ledgers else "",
        )
        + (_DEBIT_ACCOUNT if account else "")
        + (_DEBIT_DAY if day else "")
        + (_PLANNED if planned else "")
        + "\nSELECT (SELECT count(*) FROM step), "
        + ("(SELECT json_agg(runs) FROM runs), " if ledgers else "NULL, ")
        + ("(SELECT json_agg(account) FROM account), " if account else "NULL, ")
        + ("(SELECT usd_micros FROM day)" if day else "NULL")
    )


_CAPS = ("max_tokens", "max_usd_micros", "max_turns", "max_tool_calls")


def record_result(
    fence: Fence,
    *,
    seq: int,
    result: Any,
    cost: Cost,
    settled_by: str = "executed",
    executions: int = 1,
    turns: int = 0,
    tool_calls: int = 0,
    debit_ids: list[int] | None = None,
    account_id: int | None = None,
    account_capped: bool = False,
    replayable: bool = False,
    planned: list[tuple[int, str, str, Any]] | None = None,
    ledgers: bool = True,
) -> Debit | None:
    """Record the one result of step `seq` with its ledger update; return the new totals.

    `replayable` (a free step that is safe to run again) lets the commit skip its WAL flush.
    Without `ledgers` (no cap anywhere in the run's tree), the debited runs' totals are not
    returned (`Debit.runs` is empty); the account's and the day's still are when debited.
    `planned` (seq, kind, name, request) are read steps whose intents commit with this result.
    Returns None when nothing needed debiting. Raises `LeaseLost` when the fence moved and
    `KernelError` when the step has no intent or already has a result.
    """
    params: dict[str, Any] = {
        "run": fence.run_id,
        "fence": fence.token,
        "seq": seq,
        "result": _scrubbed(result),
        "settled_by": settled_by,
        "executions": executions,
    }
    if cost.is_zero and not (turns or tool_calls or planned):
        if _execute(_RESULT_REPLAYABLE if replayable else _RESULT, params).fetchone() is None:
            _explain_refused_result(fence, seq)
        return None
    params.update(
        cost.as_dict(),
        turns=turns,
        tool_calls=tool_calls,
        tokens=cost.tokens,
        debit_ids=debit_ids or [fence.run_id],
        account=account_id,
    )
    # Counting a free read (a tool call) is as replayable as the read itself.
    if planned:
        params["planned"] = Jsonb(
            [
                {
                    "seq": s,
                    "kind": k,
                    "name": n,
                    "request": r,
                    "hash": request_hash(k, n, r),
                }
                for s, k, n, r in planned
            ]
        )
    sql = _debit_sql(
        account=account_capped,
        day=cost.usd_micros > 0,
        replayable=replayable and cost.is_zero and not planned,
        planned=bool(planned),
        ledgers=ledgers,
    )
    row = _execute(sql, params).fetchone()
    written, runs, accounts, day = row or (0, None, None, None)
    if not written:
        _explain_refused_result(fence, seq)
    return Debit(
        runs={
            r["id"]: Ledger(
                tokens=r["tokens"],
                usd_micros=r["usd_micros"],
                turns=r["turns"],
                tool_calls=r["tool_calls"],
                caps={cap: r[cap] for cap in _CAPS},
            )
            for r in runs or []
        },
        account=(
            Ledger(
                tokens=accounts[0]["spent_tokens"],
                usd_micros=accounts[0]["spent_usd_micros"],
                turns=accounts[0]["spent_turns"],
                tool_calls=accounts[0]["spent_tool_calls"],
                caps={cap: accounts[0][cap] for cap in _CAPS},
            )
            if accounts
            else None
        ),
        day_usd_micros=day,
    )


_FLUSH = """
WITH fenced AS (SELECT id FROM kernel_run WHERE id = %(run)s AND fence = %(fence)s FOR SHARE)
UPDATE kernel_run SET turns = turns + %(turns)s, tool_calls = tool_calls + %(tool_calls)s,
    billed_through = CASE WHEN id = %(run)s THEN %(seq)s ELSE billed_through END
WHERE id = ANY(%(debit_ids)s) AND EXISTS (SELECT 1 FROM fenced)
RETURNING id
"""


def bill_counters(
    fence: Fence, *, seq: int, turns: int, tool_calls: int, debit_ids: list[int]
) -> None:
    """Add the counters of free steps up to `seq` to the ledger (run and ancestors), fenced."""
    params = {
        "run": fence.run_id,
        "fence": fence.token,
        "seq": seq,
        "turns": turns,
        "tool_calls": tool_calls,
        "debit_ids": debit_ids,
    }
    if not _execute(_FLUSH, params).fetchall():
        raise LeaseLost(f"run {fence.run_id}: fence {fence.token} is stale")


def _explain_refused_result(fence: Fence, seq: int) -> None:
    """A result that touched no row: say precisely why (rare path, so a second query is fine)."""
    row = _query("SELECT fence FROM kernel_run WHERE id = %s", (fence.run_id,)).fetchone()
    if row is None:
        raise KernelError(f"No run {fence.run_id}.", code="not_found", status=404)
    if row[0] != fence.token:
        raise LeaseLost(f"run {fence.run_id}: fence {fence.token} is stale (now {row[0]})")
    step = _query(
        "SELECT finished_at IS NOT NULL FROM kernel_step WHERE run_id = %s AND seq = %s",
        (fence.run_id, seq),
    ).fetchone()
    if step is None:
        raise KernelError(
            f"Step {seq} of run {fence.run_id} has no intent: record the intent first.",
            code="no_intent",
        )
    raise KernelError(
        f"Step {seq} of run {fence.run_id} already has a result; a result is written once.",
        code="duplicate_result",
        status=409,
    )


def append_event(
    kind: str,
    *,
    run_id: int | None = None,
    account_id: int | None = None,
    seq: int | None = None,
    trust: Trust = Trust.SYSTEM,
    **data: Any,
) -> Event:
    """Append one event; with a transaction open, it commits (or not) with it."""
    return Event.objects.create(
        at=timezone.now(),
        kind=kind,
        run_id=run_id,
        account_id=account_id,
        seq=seq,
        trust=trust,
        data=scrub_value(data),
    )
