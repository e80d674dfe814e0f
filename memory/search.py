"""`memory_search`: full text and vectors, each a short candidate list, fused by rank.

1. Full text: the query's words (English stemming) OR-ed, ranked by `ts_rank_cd`, in the
   scopes asked, valid at the moment asked (`as_of`, now by default) — at most `CANDIDATES`.
2. Vectors: the query embedded (e5 "query:"), nearest notes by cosine, same filters, same cap.
3. Reciprocal rank fusion of the two lists, plus a light prior for recent notes.

Each list is capped, so the cost follows the candidates, not the size of the scope.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from memory import embeddings
from memory.models import TEXT_SEARCH
from memory.notes import NoteError, check_scope

CANDIDATES = 50
EXACT_UP_TO = 20_000  # notes in the searched scopes; above, the HNSW index
EF_SEARCH = 200  # the index's beam: wider than the default 40, for filtered scans
RRF_K = 60
RECENCY_WEIGHT = 0.002  # at most a few ranks' worth: a tie-breaker, not a sort order
RECENCY_DAYS = 180.0
SNIPPET = 240
MAX_QUERY = 1000


@dataclass(frozen=True)
class Hit:
    scope: str
    path: str
    title: str
    snippet: str
    score: float
    valid_from: datetime
    invalid_at: datetime | None
    verified: bool
    source_events: tuple[int, ...]


def search(
    query: str, *, scopes: Sequence[str], as_of: datetime | None = None, k: int = 10
) -> list[Hit]:
    query = " ".join(query.split())[:MAX_QUERY]
    if not query:
        raise NoteError("Say what to search for.")
    if not scopes:
        return []
    if not 1 <= k <= 100:
        raise NoteError("k is 1 to 100.")
    for scope in scopes:
        check_scope(scope)
    moment = as_of or timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM memory_scope WHERE name = ANY(%s)", [list(scopes)])
        scope_ids = [row[0] for row in cursor.fetchall()]
    if not scope_ids:
        return []
    textual = _full_text(query, scope_ids, moment)
    vectorial = _nearest(query, scope_ids, moment)
    scores: dict[int, float] = {}
    for ranked in (textual, vectorial):
        for rank, note_id in enumerate(ranked):
            scores[note_id] = scores.get(note_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    if not scores:
        return []
    rows = _rows(list(scores))
    for note_id, row in rows.items():
        age = max((moment - row["valid_from"]).total_seconds() / 86400.0, 0.0)
        scores[note_id] += RECENCY_WEIGHT * math.exp(-age / RECENCY_DAYS)
    best = sorted(scores, key=lambda i: (-scores[i], -rows[i]["valid_from"].timestamp()))[:k]
    words = _words(query)
    return [
        Hit(
            scope=rows[i]["scope"],
            path=rows[i]["path"],
            title=rows[i]["title"],
            snippet=_snippet(rows[i]["body"], words),
            score=round(scores[i], 6),
            valid_from=rows[i]["valid_from"],
            invalid_at=rows[i]["invalid_at"],
            verified=rows[i]["verified"],
            source_events=_events(rows[i]["source_events"]),
        )
        for i in best
    ]


_VALID = (
    "n.scope_id = ANY(%s) AND n.valid_from <= %s AND (n.invalid_at IS NULL OR n.invalid_at > %s)"
)


def _full_text(query: str, scope_ids: list[int], moment: datetime) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH q AS (
              SELECT to_tsquery(%s::regconfig, string_agg(quote_literal(lexeme), ' | ')) AS query
              FROM unnest(to_tsvector(%s::regconfig, %s))
            )
            SELECT n.id FROM memory_note n, q
            WHERE q.query IS NOT NULL AND n.search @@ q.query AND {_VALID}
            ORDER BY ts_rank_cd(n.search, q.query) DESC, n.valid_from DESC
            LIMIT %s
            """,  # noqa: S608  # constant fragments only
            [TEXT_SEARCH, TEXT_SEARCH, query, scope_ids, moment, moment, CANDIDATES],
        )
        return [row[0] for row in cursor.fetchall()]


def _nearest(query: str, scope_ids: list[int], moment: datetime) -> list[int]:
    """The nearest notes by cosine. pgvector's HNSW index filters *after* its scan (0.6 has no
    iterative scan): used on scopes that are a small part of the index, it would return the few
    of its `ef_search` neighbours that happen to be theirs. So: an exact scan (a sort of the
    scopes' vectors, cheap while they are few) below `EXACT_UP_TO` notes, the index above, with a
    wider beam, and the exact scan again if the index still returned too few."""
    vector = "[" + ",".join(f"{x:.7g}" for x in embeddings.query_vector(query)) + "]"
    arguments: list[Any] = [scope_ids, moment, moment, vector, CANDIDATES]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memory_note WHERE scope_id = ANY(%s) LIMIT %s) t",
            [scope_ids, EXACT_UP_TO + 1],
        )
        if cursor.fetchone()[0] > EXACT_UP_TO:
            cursor.execute("SET LOCAL hnsw.ef_search = %s", [EF_SEARCH])
            cursor.execute(_NEAREST.format(distance="n.embedding <=> %s::vector"), arguments)
            found = [row[0] for row in cursor.fetchall()]
            if len(found) == CANDIDATES:
                return found
        # `+ 0`: an expression the index cannot serve, so the planner sorts exactly.
        cursor.execute(_NEAREST.format(distance="(n.embedding <=> %s::vector) + 0"), arguments)
        return [row[0] for row in cursor.fetchall()]


_NEAREST = (  # constant fragments only
    "SELECT n.id FROM memory_note n WHERE n.embedding IS NOT NULL AND "  # noqa: S608
    + _VALID
    + " ORDER BY {distance} LIMIT %s"
)


def _rows(ids: list[int]) -> dict[int, dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT n.id, s.name, n.path, n.title, n.body, n.valid_from, n.invalid_at, n.verified,
                   n.source_events
            FROM memory_note n JOIN memory_scope s ON s.id = n.scope_id
            WHERE n.id = ANY(%s)
            """,
            [ids],
        )
        names = (
            "scope",
            "path",
            "title",
            "body",
            "valid_from",
            "invalid_at",
            "verified",
            "source_events",
        )
        return {row[0]: dict(zip(names, row[1:], strict=True)) for row in cursor.fetchall()}


def _events(value: Any) -> tuple[int, ...]:
    """A jsonb column read by a raw cursor: Django has psycopg hand it over as text."""
    return tuple(json.loads(value) if isinstance(value, str) else value)


def _words(query: str) -> list[str]:
    return [w for w in re.findall(r"\w+", query.lower()) if len(w) > 2]


def _snippet(body: str, words: list[str]) -> str:
    """The body around the first query word it contains (its start otherwise)."""
    text = " ".join(body.split())
    lowered = text.lower()
    found = [lowered.find(w) for w in words if w in lowered]
    start = max(min(found) - SNIPPET // 3, 0) if found else 0
    piece = text[start : start + SNIPPET]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET < len(text) else "")
