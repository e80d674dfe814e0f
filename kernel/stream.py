"""The event stream: every event of the log, numbered in the order it became visible.

Clients (the console's WebSocket, `GET /api/v1/events`) hold a cursor, the number of the last
event they have, and ask for what comes after it. Event ids cannot serve as that cursor: they
are allocated before commit, so with concurrent writers an event with a lower id can become
visible after a higher one, and a client already past it would never see it. Numbers are given
after the fact by one sequencer at a time (`sequence`):

1. every event row carries `tx`, the id of the transaction that wrote it;
2. all transactions older than the oldest one still running (the snapshot's xmin) have ended:
   their events are all visible now, and no event of theirs can still appear;
3. those not numbered yet get the next numbers, in id order, gapless, in one statement (step
   events are derived from the step rows in that same statement, see `_SEQUENCE`).

So an event is numbered only once nothing can appear before it any more, and a client at
cursor N misses nothing by asking for `number > N`. A long-running *writing* transaction delays
the numbering (not the writes) of everything after it until it ends. The events table stays the
reference; the number is what clients call the "event number".

Kinds a client sees (the `kind` of each event):
- runs: `run.created` (program, parent), `run.waiting` (reason, until), `run.paused`,
  `run.resumed`, `run.forked` (source, seq), `run.stop_requested` (reason, runs, by),
  `run.interrupt_requested`, `run.retry_requested` (seq, by: a provider's outage cut short),
  `run.finished` (status, error);
- steps, derived by the sequencer from the step rows (migration 0018) for every journaled
  step, at the place in the stream its intent and its result took when written:
  `step.started` (kind, name, effect) and `step.completed` (kind, name, settled_by, tokens,
  usd_micros, is_error for tool calls, and the whole `text`/`reasoning` of a model step, which
  streamed meanwhile as ephemeral deltas published by the program on `kernel.bus`);
- the owner's side: `wait.opened` (wait_kind, wait: an approval request or a question to the
  owner, a timer, a reconciliation; read with its `wait` summary: the question's type, tool,
  risk, justification or text, choices, due_at), `wait.answered` (answer), `wait.reopened`,
  `owner.message`, `owner.notified`.
Items: a model step's text and reasoning arrive as deltas while it runs and whole in its
`step.completed`; the tool calls it asks for are steps of their own. Accounts have no events
of their own: an account's lifecycle is that of its root runs (`account` is filled in on every
event of a run, including step events, which are stored without it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict

from django.db import connection, transaction

from kernel import statements
from kernel.models import Wait

# The advisory lock key of the sequencer ("agentos event stream", any constant would do).
SEQUENCER_LOCK = 0x61676E7473747265

# One statement, so the head, the step events derived and the numbering see one snapshot.
# Numbers continue from the head rather than from a sequence: a rolled-back numbering then leaves
# no gap.
#
# Step events are not written by the journal (migration 0018): each step row holds the ids its
# `step.started` and `step.completed` took from the events' sequence when it was written, and
# the transactions that wrote them. Once such a transaction is older than every running one, the
# event is derived from the row and numbered with the others, in id order: exactly where a
# trigger's row would have been. `announced` (0, 1 started, 2 done) keeps each derived once.
# Steps that announce their start: effects, model calls and waits; reads only complete (0011).
_SEQUENCE = """
WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
head AS (
    SELECT coalesce(max(number), 0) AS number FROM kernel_event WHERE number IS NOT NULL),
pending AS (
    SELECT s.id AS step, s.announced = 0 AND (s.effect <> 'read' OR s.kind = 'wait_human')
            AND (s.started_tx IS NULL OR s.started_tx < horizon.xmin) AS start_ready,
        s.finished_at IS NOT NULL
            AND (s.finished_tx IS NULL OR s.finished_tx < horizon.xmin) AS done_ready
    FROM kernel_step s, horizon WHERE s.announced < 2),
derived AS (
    SELECT coalesce(s.started_event, nextval('kernel_event_id_seq')) AS id, s.started_at AS at,
        s.run_id, s.seq, 'step.started' AS kind, 'system' AS trust,
        jsonb_build_object('kind', s.kind, 'name', s.name, 'effect', s.effect) AS data,
        s.started_tx AS tx
    FROM pending p JOIN kernel_step s ON s.id = p.step WHERE p.start_ready
    UNION ALL
    SELECT coalesce(s.finished_event, nextval('kernel_event_id_seq')), s.finished_at,
        s.run_id, s.seq, 'step.completed',
        -- Whoever produced the result (0014): the owner, the model, a tool's data, the kernel.
        CASE WHEN s.settled_by = 'owner' THEN 'owner'
            WHEN s.kind IN ('model_call', 'compaction') THEN 'agent'
            WHEN s.kind = 'tool_call' THEN 'tool'
            ELSE 'system' END,
        jsonb_build_object(
            'kind', s.kind, 'name', s.name, 'settled_by', s.settled_by,
            'input_tokens', s.input_tokens, 'output_tokens', s.output_tokens,
            'cache_read_tokens', s.cache_read_tokens,
            'cache_write_tokens', s.cache_write_tokens, 'usd_micros', s.usd_micros)
        || CASE WHEN jsonb_typeof(s.result) = 'object' THEN jsonb_strip_nulls(
            jsonb_build_object(
                'is_error', s.result -> 'is_error',
                -- The whole text the console saw stream as deltas (which are never stored).
                'text', CASE s.kind
                    WHEN 'model_call' THEN NULLIF(s.result -> 'text', '""')
                    WHEN 'compaction' THEN NULLIF(s.result -> 'narrative', '""') END,
                'reasoning', CASE WHEN s.kind = 'model_call'
                    THEN NULLIF(s.result -> 'reasoning', '""') END))
        ELSE '{}'::jsonb END,
        s.finished_tx
    FROM pending p JOIN kernel_step s ON s.id = p.step WHERE p.done_ready),
ready AS (
    SELECT id, at FROM kernel_event, horizon
    WHERE number IS NULL AND (tx IS NULL OR tx < horizon.xmin)),
positions AS (
    SELECT id, row_number() OVER (ORDER BY id) AS position
    FROM (SELECT id FROM ready UNION ALL SELECT id FROM derived) AS visible),
numbered AS (
    UPDATE kernel_event e SET number = head.number + p.position
    FROM head, ready r JOIN positions p ON p.id = r.id
    WHERE e.id = r.id AND e.at = r.at
    RETURNING 1),
inserted AS (
    INSERT INTO kernel_event (id, at, run_id, seq, kind, trust, data, tx, number)
    SELECT d.id, d.at, d.run_id, d.seq, d.kind, d.trust, d.data, d.tx, head.number + p.position
    FROM derived d JOIN positions p ON p.id = d.id, head
    RETURNING 1),
marked AS (
    UPDATE kernel_step s SET announced = CASE WHEN p.done_ready THEN 2 ELSE 1 END
    FROM pending p WHERE s.id = p.step AND (p.start_ready OR p.done_ready))
SELECT (SELECT count(*) FROM numbered) + (SELECT count(*) FROM inserted)
"""


class StreamEvent(TypedDict):
    """One numbered event as clients read it."""

    number: int
    at: datetime
    kind: str
    account: int | None
    run: int | None
    seq: int | None
    trust: str
    data: dict[str, Any]
    # For `wait.opened` only: what the run waits for (see `_wait_summary`); else None.
    wait: dict[str, Any] | None


def sequence() -> int:
    """Number the events whose transactions have all ended; return how many were numbered.

    Waits for a sequencer already at work (each holds the lock for one short statement), so
    that on return everything committed before the call and older than the oldest running
    writer is numbered. Safe to call from anywhere, as often as wanted.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEQUENCER_LOCK])
        # A separate statement: its snapshot is taken after the lock, so it sees the numbers
        # the previous sequencer committed. Prepared once per connection: planning it cost as
        # much as running it, and the live stream runs it every few milliseconds
        # (`agentos.stream_tap`).
        row = statements.execute(_SEQUENCE, {}).fetchone()
    return int(row[0]) if row else 0


def head() -> int:
    """The highest event number given so far (0 when none)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(number), 0) FROM kernel_event WHERE number IS NOT NULL")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


# One query: the account of a step event (stored without it) comes from its run, which never
# changes account. The live stream reads a page every few milliseconds (`agentos.stream_tap`).
_PAGE = """
SELECT e.number, e.at, e.kind, coalesce(e.account_id, r.account_id), e.run_id, e.seq, e.trust,
    e.data
FROM kernel_event e LEFT JOIN kernel_run r ON e.account_id IS NULL AND r.id = e.run_id
WHERE e.number > %(after)s
ORDER BY e.number
LIMIT %(limit)s
"""


def page(after: int, limit: int) -> list[StreamEvent]:
    """Numbered events with `number > after`, in number order, at most `limit` of them."""
    rows = statements.query(_PAGE, {"after": after, "limit": limit}).fetchall()
    if not rows:
        return []
    waits = _wait_summaries([row[7].get("wait") for row in rows if row[2] == "wait.opened"])
    return [
        StreamEvent(
            number=number,
            at=at,
            kind=kind,
            account=account,
            run=run,
            seq=seq,
            trust=trust,
            data=data,
            wait=waits.get(data.get("wait")) if kind == "wait.opened" else None,
        )
        for number, at, kind, account, run, seq, trust, data in rows
    ]


def _wait_summaries(ids: list[Any]) -> dict[int, dict[str, Any]]:
    """What each wait asks, enough to show an approval request or a question without another
    request: the question's type, the tool and its risk, the justification or the text.

    Read from the wait row, whose question is written once with it: the same on every read.
    """
    wanted = [pk for pk in ids if isinstance(pk, int)]
    if not wanted:
        return {}
    found = Wait.objects.filter(pk__in=wanted).only("kind", "question", "due_at")
    return {wait.pk: _wait_summary(wait) for wait in found}


_SUMMARY_KEYS = ("type", "tool", "risk", "args_hash", "justification", "text", "choices")


def _wait_summary(wait: Wait) -> dict[str, Any]:
    question = wait.question if isinstance(wait.question, dict) else {}
    return {
        "id": wait.pk,
        "kind": wait.kind,
        "due_at": wait.due_at,
        **{key: question[key] for key in _SUMMARY_KEYS if key in question},
    }
