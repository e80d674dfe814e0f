"""The billing statements: what a step's result charges, in the statement that records it.

A step that cost something, or counts as a turn or a tool call, records its result and debits
the run, its ancestors, its account and the day in one fenced statement (`kernel.journal`
sends it). Its parts are chosen per step: a statement has only the parts its step needs. The
caps the totals are checked against are `kernel.budgets`' and `kernel.metering`'s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from kernel.budgets import Ledger


@dataclass(frozen=True)
class Debit:
    """Totals after a debit: per debited run (subtree totals), the account's, and today's spend."""

    runs: dict[int, Ledger]
    account: Ledger | None
    day_usd_micros: int | None


# A step's result (as the journal's free result writes it), plus the ledger: the run and its
# ancestors (ascending ids, so concurrent debits of one tree lock rows in one order), and, only
# when needed, the account's totals (when it has caps) and today's global spend (when the step
# cost something). Each part is paid per step, so a statement has only the parts its step needs.
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


# A model call's cost, by its provider and the UTC day: what the provider spend caps read.
_DEBIT_PROVIDER = """,
provider AS (
    INSERT INTO kernel_providerspend (day, provider, usd_micros)
    SELECT (now() AT TIME ZONE 'UTC')::date, %(provider)s, %(usd_micros)s
    WHERE EXISTS (SELECT 1 FROM step)
    ON CONFLICT (day, provider) DO UPDATE
        SET usd_micros = kernel_providerspend.usd_micros + EXCLUDED.usd_micros)"""


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
def statement(
    *,
    account: bool,
    day: bool,
    replayable: bool,
    planned: bool = False,
    ledgers: bool = True,
    provider: bool = False,
) -> str:
    """The debit statement of a result with these parts. `replayable`: its commit skips the WAL
    flush (see the journal's replayable result); `ledgers`: the debited runs' totals come back;
    `provider`: a model call's cost goes to its provider's day too."""
    async_commit = " AND set_config('synchronous_commit', 'off', true) = 'off'"
    # Assembled from constant parts only; every value travels as a bound parameter.
    return (
        _DEBIT_RUNS.format(  # noqa: S608
            async_commit=async_commit if replayable else "",
            returning=_LEDGERS if ledgers else "",
        )
        + (_DEBIT_ACCOUNT if account else "")
        + (_DEBIT_DAY if day else "")
        + (_DEBIT_PROVIDER if provider else "")
        + (_PLANNED if planned else "")
        + "\nSELECT (SELECT count(*) FROM step), "
        + ("(SELECT json_agg(runs) FROM runs), " if ledgers else "NULL, ")
        + ("(SELECT json_agg(account) FROM account), " if account else "NULL, ")
        + ("(SELECT usd_micros FROM day)" if day else "NULL")
    )


_CAPS = ("max_tokens", "max_usd_micros", "max_turns", "max_tool_calls")


def totals(
    runs: list[dict[str, Any]] | None, accounts: list[dict[str, Any]] | None, day: int | None
) -> Debit:
    """The totals a debit statement returned (its last three columns)."""
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


# The turns and tool calls of free steps, billed in bulk (`kernel.metering`) without a result.
COUNTERS = """
WITH fenced AS (SELECT id FROM kernel_run WHERE id = %(run)s AND fence = %(fence)s FOR SHARE)
UPDATE kernel_run SET turns = turns + %(turns)s, tool_calls = tool_calls + %(tool_calls)s,
    billed_through = CASE WHEN id = %(run)s THEN %(seq)s ELSE billed_through END
WHERE id = ANY(%(debit_ids)s) AND EXISTS (SELECT 1 FROM fenced)
RETURNING id
"""
