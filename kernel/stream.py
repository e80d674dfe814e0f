"""The event stream: every event of the log, numbered in the order it became visible.

Clients (the console's WebSocket, `GET /api/v1/events`) hold a cursor, the number of the last
event they have, and ask for what comes after it. Event ids cannot serve as that cursor: they
are allocated before commit, so with concurrent writers an event with a lower id can become
visible after a higher one, and a client already past it would never see it. Numbers are given
after the fact by one sequencer at a time (`sequence`):

1. every event row carries `tx`, the id of the transaction that wrote it;
2. all transactions older than the oldest one still running (the snapshot's xmin) have ended:
   their events are all visible now, and no event of theirs can still appear;
3. those not numbered yet get the next numbers, in id order, gapless, in one statement.

So an event is numbered only once nothing can appear before it any more, and a client at
cursor N misses nothing by asking for `number > N`. A long-running *writing* transaction delays
the numbering (not the writes) of everything after it until it ends. The events table stays the
reference; the number is what clients call the "event number".

Kinds a client sees (the `kind` of each event):
- runs: `run.created` (program, parent), `run.waiting` (reason, until), `run.paused`,
  `run.resumed`, `run.forked` (source, seq), `run.stop_requested` (reason, runs, by),
  `run.interrupt_requested`, `run.finished` (status, error);
- steps, written by the database (migration 0010) for every journaled step:
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

from kernel.models import Event, Run, Wait

# The advisory lock key of the sequencer ("agentos event stream", any constant would do).
SEQUENCER_LOCK = 0x61676E7473747265

# One statement, so the head and the numbering see the same snapshot. Numbers continue from the
# head rather than from a sequence: a rolled-back numbering then leaves no gap.
_SEQUENCE = """
WITH head AS (
    SELECT coalesce(max(number), 0) AS number FROM kernel_event WHERE number IS NOT NULL),
ready AS (
    SELECT id, at, row_number() OVER (ORDER BY id) AS position FROM kernel_event
    WHERE number IS NULL
        AND (tx IS NULL OR tx < pg_snapshot_xmin(pg_current_snapshot())))
UPDATE kernel_event e SET number = head.number + ready.position
FROM head, ready
WHERE e.id = ready.id AND e.at = ready.at
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
        # the previous sequencer committed.
        cursor.execute(_SEQUENCE)
        return int(cursor.rowcount)


def head() -> int:
    """The highest event number given so far (0 when none)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(number), 0) FROM kernel_event WHERE number IS NOT NULL")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def page(after: int, limit: int) -> list[StreamEvent]:
    """Numbered events with `number > after`, in number order, at most `limit` of them."""
    events = list(Event.objects.filter(number__gt=after).order_by("number")[:limit])
    if not events:
        return []
    # Step events leave the account to the reader: runs never change account.
    missing = {e.run_id for e in events if e.account_id is None and e.run_id is not None}
    accounts: dict[int | None, int] = dict(
        Run.objects.filter(pk__in=missing).values_list("pk", "account_id")
    )
    waits = _wait_summaries([e.data.get("wait") for e in events if e.kind == "wait.opened"])
    return [
        StreamEvent(
            number=e.number or 0,  # never 0: filtered on number > after
            at=e.at,
            kind=e.kind,
            account=e.account_id if e.account_id is not None else accounts.get(e.run_id),
            run=e.run_id,
            seq=e.seq,
            trust=e.trust,
            data=e.data,
            wait=waits.get(e.data.get("wait")) if e.kind == "wait.opened" else None,
        )
        for e in events
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
