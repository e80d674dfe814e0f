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

Statements go straight to libpq with server-side binding and prepared plans (the ORM doubles
the cost of a step: docs/design.md §20), through `kernel.statements`; a result's debit is
`kernel.debits`'. Zero rows means the fence moved: `LeaseLost`, nothing written.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError
from django.utils import timezone
from psycopg.types.json import Jsonb

from agentos.core import jsontext, roots
from agentos.core.scrubber import scrub_json, scrub_value
from kernel import crashpoints, debits, statements
from kernel.budgets import Cost
from kernel.debits import Debit
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


# The hash is taken for every step, and again for every step a resume replays (most of a
# replay's own time). A value that is not JSON counts by its text there.
_encode_for_hash = jsontext.encoder(sort_keys=True, default=str)
# A new intent's request: JSON or refused (as the row's `jsonb` needs), its text both hashed and
# sent as the row's value, so encoded once.
_encode_request = jsontext.encoder(sort_keys=True)


def request_hash(kind: str, name: str, request: Any) -> str:
    """The hash a replay compares its request with. Paths under the install's roots count
    relative to their root (`roots.neutral`): a run restored on another machine, its data and
    workspaces dirs elsewhere, replays the steps it journaled here (migration 0025 re-hashed
    the steps journaled before)."""
    return _hashed(_encode_for_hash([kind, name, request]))


def _hashed(text: str) -> str:
    return hashlib.sha256(roots.neutral(text).encode()).hexdigest()


def _request(kind: str, name: str, request: Any) -> tuple[Jsonb, str]:
    """A new intent's request as the row's value, and its hash (`request_hash`'s, byte for
    byte: the list's encoding is its items' joined)."""
    text = _encode_request(request)
    listed = f"[{jsontext.quoted(kind)},{jsontext.quoted(name)},{text}]"
    return Jsonb(text, dumps=_as_is), _hashed(listed)


def idempotency_key(run_id: int, seq: int) -> str:
    """`hash(run_id, seq)`: the key an idempotent executor uses to find its earlier result.

    Computed, never stored (migration 0019): a step row is written twice per step."""
    return hashlib.sha256(f"agentos-step:{run_id}:{seq}".encode()).hexdigest()


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
    row = statements.execute(_LOAD, {"run": run_id}, prepare=False).fetchone()
    return {step[0]: Record(*step) for step in (row[0] if row else [])}


# Also returns the run's `wake_pending` flag (read from the row it locks anyway): whether
# something (an owner message, a child's end) arrived while the run executes.
_FENCED = """
WITH fenced AS (
    SELECT id, wake_pending FROM kernel_run
    WHERE id = %(run)s AND fence = %(fence)s FOR SHARE)"""
_INSERT_STEP = """
INSERT INTO kernel_step (run_id, seq, kind, effect, name, request, request_hash, idempotency_key,
    started_at, settled_by, executions, input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens, usd_micros)
SELECT id, %(seq)s, %(kind)s, %(effect)s, %(name)s, %(request)s, %(hash)s, '', now(), '',
    0, 0, 0, 0, 0, 0"""
_RETURNING = """
RETURNING (SELECT wake_pending FROM fenced)
"""
_INTENT = _FENCED + _INSERT_STEP + "\nFROM fenced" + _RETURNING

# The same, also recording the result of the step before it: a free step safe to run again
# whose result the context held back (`Deferred`) rides on this statement instead of taking a
# commit of its own: one commit per step.
# Both are fenced by the same lock; the intent never commits without that result. It reads
# `prior` before inserting: `prior` then runs first, and the event id its row takes (the read's
# `step.completed`) comes before the new intent's `step.started`.
# A held result written (`Deferred`): its finish is the database's clock less the time since.
_SET_PRIOR = """
UPDATE kernel_step SET result = %(prior_result)s,
    finished_at = now() - %(prior_age_us)s * interval '1 microsecond',
    finished_event = nextval('kernel_event_id_seq'), finished_tx = pg_current_xact_id(),
    settled_by = %(prior_settled_by)s, executions = executions + %(prior_executions)s
WHERE run_id = %(run)s AND seq = %(prior_seq)s AND finished_at IS NULL
    AND EXISTS (SELECT 1 FROM fenced)"""
_PRIOR = ",\nprior AS (" + _SET_PRIOR + "\nRETURNING id)"
_AFTER_PRIOR = "\nFROM fenced, (SELECT count(*) FROM prior) AS recorded_first"
_INTENT_AFTER_DEFERRED = _FENCED + _PRIOR + _INSERT_STEP + _AFTER_PRIOR + _RETURNING

# The intent of a step whose only effect is its cost, safe to run again (a read, a model call),
# commits without waiting for its WAL flush, as a replayable result does (`_RESULT_REPLAYABLE`):
# a database crash before the flush loses it and the held result it carries, and both steps run
# again, as after a worker's death before it. A write's intent always waits: a replay puts the
# write's checkpoint back only if its intent survived (docs/design.md §7). The next commit that
# waits flushes this one's record along with its own.
_NO_FLUSH = "\nWHERE set_config('synchronous_commit', 'off', true) = 'off'"
_INTENT_NO_FLUSH = _FENCED + _INSERT_STEP + "\nFROM fenced" + _NO_FLUSH + _RETURNING
_INTENT_AFTER_DEFERRED_NO_FLUSH = (
    _FENCED + _PRIOR + _INSERT_STEP + _AFTER_PRIOR + _NO_FLUSH + _RETURNING
)


@dataclass(frozen=True)
class Deferred:
    """The result of a free step that is safe to run again (a read, an idempotent write, a
    model call that cost nothing), not written yet: it goes with the next intent.

    Losing it in a crash is what the step's effect class allows: the step has an intent and no
    result, so it runs again (a write with the same idempotency key, docs/design.md §7). A step
    that cost something commits its result with its debit at once: a cap it crosses must stop
    the run before the next intent is written.
    """

    seq: int
    result: Any
    settled_by: str
    executions: int
    # When the step ended (`time.monotonic()`), not when its result is written: written as the
    # database's clock less the time since, so a step's stamps all come from one clock.
    ended: float


# A held-back result written on its own (before a write that cannot carry it, or when the
# execution ends or parks), async commit: the write that follows flushes it with its own.
_FENCED_ONLY = """
WITH fenced AS (SELECT id FROM kernel_run WHERE id = %(run)s AND fence = %(fence)s FOR SHARE)"""
_UNFLUSHED = "\n    AND set_config('synchronous_commit', 'off', true) = 'off'"
_RETURNING_ID = "\nRETURNING id\n"
_DEFERRED = _FENCED_ONLY + _SET_PRIOR + _UNFLUSHED + _RETURNING_ID


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
        "prior_age_us": max(int((time.monotonic() - prior.ended) * 1e6), 0),
    }


def record_deferred(fence: Fence, prior: Deferred) -> None:
    """Write a held-back result now (see `Deferred`)."""
    params = {"run": fence.run_id, "fence": fence.token, **_prior_params(prior)}
    if statements.execute(_DEFERRED, params).fetchone() is None:
        _explain_refused_result(fence, prior.seq)
    crashpoints.hit("deferred_committed", run=fence.run_id, seq=prior.seq)


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
    flush: bool = True,
) -> bool:
    """Commit the intent of step `seq` (and, for a wait step, its wait row) before it runs;
    with `prior`, the held-back result of the step before it, in the same statement. Without
    `flush` (a read's or a model call's intent), the commit does not wait for its WAL flush
    (see `_NO_FLUSH`).

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
    }
    params["request"], params["hash"] = _request(kind, name, request)
    sql = _INTENT if flush else _INTENT_NO_FLUSH
    if prior is not None:
        if wait is not None:
            raise KernelError("A wait's intent does not carry a deferred result.")
        sql = _INTENT_AFTER_DEFERRED if flush else _INTENT_AFTER_DEFERRED_NO_FLUSH
        params.update(_prior_params(prior))
    elif wait is not None:
        if not flush:
            raise KernelError("A wait's intent waits for its flush: the owner may answer it.")
        sql = _INTENT_WITH_WAIT
        params["wait_kind"], question, params["due_at"] = wait
        params["question"] = Jsonb(question)
    try:
        written = statements.execute(sql, params).fetchone()
    except IntegrityError:
        raise KernelError(
            f"Step {seq} of run {fence.run_id} already has an intent.", code="duplicate_intent"
        ) from None
    if written is None:
        raise LeaseLost(f"run {fence.run_id}: fence {fence.token} is stale")
    return bool(written[0]) if wait is None else True


# The result of a step that cost nothing (one that did goes with its debit, `kernel.debits`):
# its cost columns keep the zeros of its intent.
_SET_RESULT = """
UPDATE kernel_step SET result = %(result)s, finished_at = now(), settled_by = %(settled_by)s,
    finished_event = nextval('kernel_event_id_seq'), finished_tx = pg_current_xact_id(),
    executions = executions + %(executions)s
WHERE run_id = %(run)s AND seq = %(seq)s AND finished_at IS NULL
    AND EXISTS (SELECT 1 FROM fenced)"""
_RESULT = _FENCED_ONLY + _SET_RESULT + _RETURNING_ID

# The same for a free, replayable step (a `read`, or a settled wait): it commits without waiting for
# its WAL flush: if the database crashed before the flush, the step would simply be replayed.
# `set_config(..., true)` in the statement applies to this statement's own transaction, and the
# next intent's (synchronous) commit flushes this record along with its own.
_RESULT_REPLAYABLE = _FENCED_ONLY + _SET_RESULT + _UNFLUSHED + _RETURNING_ID


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
    provider: str | None = None,
) -> Debit | None:
    """Record the one result of step `seq` with its ledger update; return the new totals.

    `replayable` (a free step that is safe to run again) lets the commit skip its WAL flush.
    Without `ledgers` (no cap anywhere in the run's tree), the debited runs' totals are not
    returned (`Debit.runs` is empty); the account's and the day's still are when debited.
    `planned` (seq, kind, name, request) are read steps whose intents commit with this result.
    `provider`: the model provider whose call this was, debited by the day for its spend caps.
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
        if (
            statements.execute(_RESULT_REPLAYABLE if replayable else _RESULT, params).fetchone()
            is None
        ):
            _explain_refused_result(fence, seq)
        return None
    params.update(
        cost.as_dict(),
        turns=turns,
        tool_calls=tool_calls,
        tokens=cost.tokens,
        debit_ids=debit_ids or [fence.run_id],
        account=account_id,
        provider=provider,
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
    sql = debits.statement(
        account=account_capped,
        day=cost.usd_micros > 0,
        replayable=replayable and cost.is_zero and not planned,
        planned=bool(planned),
        ledgers=ledgers,
        provider=provider is not None and cost.usd_micros > 0,
    )
    row = statements.execute(sql, params).fetchone()
    written, runs, accounts, day = row or (0, None, None, None)
    if not written:
        _explain_refused_result(fence, seq)
    return debits.totals(runs, accounts, day)


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
    if not statements.execute(debits.COUNTERS, params).fetchall():
        raise LeaseLost(f"run {fence.run_id}: fence {fence.token} is stale")
    crashpoints.hit("counters_billed", run=fence.run_id, seq=seq)


def _explain_refused_result(fence: Fence, seq: int) -> None:
    """A result that touched no row: say precisely why (rare path, so a second query is fine)."""
    row = statements.query("SELECT fence FROM kernel_run WHERE id = %s", (fence.run_id,)).fetchone()
    if row is None:
        raise KernelError(f"No run {fence.run_id}.", code="not_found", status=404)
    if row[0] != fence.token:
        raise LeaseLost(f"run {fence.run_id}: fence {fence.token} is stale (now {row[0]})")
    step = statements.query(
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
