"""`memory_search`: full text and vectors, each a short candidate list, fused by rank.

0. One look-up of the scopes and of how many of their notes hold each query word
   (`memory_wordcount`, kept by triggers): nothing is counted at query time.
1. Full text: the query's rare words (English stemming) OR-ed, ranked by the weights of all
   its words they hold and `ts_rank_cd`, in the scopes asked, valid at the moment asked
   (`as_of`, now by default) — at most `CANDIDATES`.
2. Vectors: the query without its words common in the scopes, embedded (e5 "query:"), nearest
   notes by cosine, same filters, at most `NEAREST`.
   Each of them, and the notes written just after it, also read in context: a note's closeness
   is raised when the notes its writer put just before it are closer still (`_in_context`).
3. Reciprocal rank fusion of the two lists (the meaning list weighing `VECTOR_WEIGHT`), plus the
   share of the query's words each note holds and a light prior for recent notes; of the notes
   of a scope saying the same, the best-ranked only.

Each list is capped, so the cost follows the candidates, not the size of the scope.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from memory import embeddings
from memory.models import TEXT_SEARCH
from memory.notes import NoteError, check_scope

CANDIDATES = 50
# The meaning list is shorter: on the development set (50, 40, 30, 20 tried) 30 lifted hit@10
# 0.910 -> 0.929 (a note only near in meaning, far down that list, displaced better ones).
NEAREST = 30
# Notes in the searched scopes up to which the nearest are found by an exact scan, a sort of
# their vectors: about 2.5 µs a note here, so 5 ms at 2,000 but 50 ms at 20,000 (measured with
# EXPLAIN ANALYZE), where the HNSW index answers in 5 to 12 ms. Above, the index.
EXACT_UP_TO = 2_000
# The index's beam (`hnsw.ef_search`) for scopes that are all of the index, divided by their
# share of it otherwise (up to pgvector's bound). Narrower lost single-hop answers in a scope
# padded to 100,000 notes, below the grep: 60 and 77 on one build of the index, 100 on another
# (an index is built in the order notes come, so two builds differ); 130 kept them on both.
# On the realistic set, 150 still missed notes an exact scan ranks first among 100,000 (a
# question's "query:" vector lies apart from the notes' "passage:" ones, where a graph's beam
# finds its way less surely): 300 lifted the padded conversation's hit@10 0.826 -> 0.845
# (temporal 0.912 -> 0.971), 600 no further; the index's part of a search 6.0 -> 9.2 ms (p50).
# On the better-connected graph of `memory/migrations/0007_vector_graph.py`, 200 finds as many
# (132 of that conversation's 155 questions, as an exact scan) as 300 (150: 131).
BEAM = 200
MAX_BEAM = 1000
# The index is read while at least this much of its beam can fall in the scopes (up to
# `MAX_BEAM`), with a beam of `MAX_BEAM` where `BEAM` would not fit: a scope that is a fifth of
# the index keeps the index (its exact scan would cost 50 ms at 20,000 notes).
MIN_BEAM = 150
MAX_WORDS = 12  # distinct query words looked up
# Words of the question embedded, at most: the embedding costs about 0.4 ms a token here (a
# 9-word question 8.4 ms, a 32-word one 16.3 ms, on two idle cores), the longest part of a search.
# Questions people ask run 10 words on average, 15 at the 95th percentile; dropping function
# words from every question instead cost hit@10 0.929 -> 0.846 on the development set.
MEANING_WORDS = 16
# A note is read in its context too: an answer often does not name what the question names ("A
# whole Sunday, I didn't even get dressed", two turns after the portrait the question asks about).
# Its context is the `CONTEXT_NOTES` notes its writer put in its scope just before it, within
# `CONTEXT_MINUTES`; its closeness to the query is raised by `CONTEXT_WEIGHT` of the amount the
# mean closeness of it and its context exceeds its own (never lowered: a note that says it all
# alone keeps its place). On the realistic development set (multi-session chats) hit@10 0.853 ->
# 0.867 (single-hop 0.803 -> 0.834), with one scope padded to 20,000 notes 0.850 -> 0.861 (that
# scope's own questions 0.858 both), the large set 0.929 -> 0.932. Tried, with the same figures:
# weight 0.7 gave 0.873 but 0.927 on the large set, 1.0 gave 0.879 and 0.917 (its answers are
# single turns among unrelated small talk, which context lifts past them); one note of context
# 0.860-0.865; three 0.861. A note's vector blended with its context's instead (kept in the
# index) gave up to 0.889 but 0.84-0.90 on the large set: the blend moves every note, not only
# those whose context is closer. Read at query time from the vectors already there: nothing to
# keep in step when a note of the context is written late, invalidated or not yet embedded.
CONTEXT_NOTES = 2
CONTEXT_MINUTES = 10
CONTEXT_WEIGHT = 0.6
COMMON_FRACTION = 0.2  # a word in more of the scopes' notes than this is not a candidate filter
MIN_COMMON = 5
# ... and a word in more notes than this neither: ranking every note of a word that common
# would cost in proportion to the scope, which only the meaning list may do (through its index).
MAX_RARE_MATCHES = 1000
# ... and the rarest words are taken until their notes add up to this: ranking costs about 10 ms
# per 1,000 notes on a busy machine, and the rarest words say the most.
MAX_MATCHES = 1500
RRF_K = 60
# The meaning list counts a little more than the words list: on the development set (1.0, 1.5,
# 2.5 tried) 1.5 lifted hit@10 0.848 -> 0.863 and MRR 0.671 -> 0.696, 2.5 no further.
VECTOR_WEIGHT = 1.5
# A candidate holding all the query's words (the common ones too: the name of the person asked
# about) gains a few ranks' worth over one holding few. On the development set (0.005, 0.01,
# 0.02 tried, with `_meaning`) 0.01 lifted hit@10 0.866 -> 0.910 and MRR 0.634 -> 0.698.
COVERAGE_WEIGHT = 0.01
RECENCY_WEIGHT = 0.002  # at most a few ranks' worth: a tie-breaker, not a sort order
RECENCY_DAYS = 180.0
SNIPPET = 240
MAX_QUERY = 1000


# The threads that embed questions while their searches' own threads query the database;
# several searches run at once (the web server's threads, the worker's).
_EMBEDDING = ThreadPoolExecutor(max_workers=8, thread_name_prefix="query-embedding")


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
    author: str = ""  # who wrote it: 'owner' or 'run:<id>' (its provenance, for a model)


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
    found = _look_up(query, list(scopes))
    if found is None:
        return []
    # The embedding (this process's cores) runs while the database ranks the full text: at
    # 100,000 notes, interleaved, p50 / p95 34.6 / 48.6 ms one after the other, 30.4 / 40.0
    # alongside.
    embedding = _EMBEDDING.submit(embeddings.query_vector, _meaning(found) or query)
    textual = _full_text(found, moment)
    vector = _literal(embedding.result())
    vectorial = _in_context(vector, _nearest(vector, found, moment), moment)
    scores: dict[int, float] = {}
    rows: dict[int, dict[str, Any]] = {}
    for ranked, weight in ((textual, 1.0), (vectorial, VECTOR_WEIGHT)):
        for rank, row in enumerate(ranked):
            note_id = row["id"]
            rows.setdefault(note_id, row)
            scores[note_id] = scores.get(note_id, 0.0) + weight / (RRF_K + rank + 1)
    present = [lexeme for lexeme, count in found.counts.items() if count]
    for note_id, row in rows.items():
        age = max((moment - row["valid_from"]).total_seconds() / 86400.0, 0.0)
        scores[note_id] += RECENCY_WEIGHT * math.exp(-age / RECENCY_DAYS)
        if present:
            held = sum(lexeme in row["lexemes"] for lexeme in present)
            scores[note_id] += COVERAGE_WEIGHT * held / len(present)
    order = sorted(scores, key=lambda i: (-scores[i], -rows[i]["valid_from"].timestamp()))
    best = _distinct(order, rows, k)
    words = _words(query)
    return [
        Hit(
            scope=found.names[rows[i]["scope_id"]],
            path=rows[i]["path"],
            title=rows[i]["title"],
            snippet=_snippet(rows[i]["body"], words),
            score=round(scores[i], 6),
            valid_from=rows[i]["valid_from"],
            invalid_at=rows[i]["invalid_at"],
            verified=rows[i]["verified"],
            source_events=_events(rows[i]["source_events"]),
            author=rows[i]["author"],
        )
        for i in best
    ]


def _distinct(order: list[int], rows: dict[int, dict[str, Any]], k: int) -> list[int]:
    """The first `k` notes of `order` that say something new: a note with the title and body of a
    better-ranked note of its scope is left out. A chat repeats its greetings every session
    ("Oh perfect timing, I just got home…"), and three copies of one would take three of the
    k places. On the realistic development set, padded to 100,000 notes, hit@10 0.859 -> 0.867
    (the padded conversation 131 -> 132 of 155); the large set 0.932 -> 0.951, MRR 0.705 ->
    0.717."""
    said: set[tuple[int, str, str]] = set()
    kept: list[int] = []
    for note_id in order:
        row = rows[note_id]
        saying = (row["scope_id"], row["title"], row["body"])
        if saying not in said:
            said.add(saying)
            kept.append(note_id)
            if len(kept) == k:
                break
    return kept


# What each candidate list returns of its notes: all the results need, in the same round trip
# (the notes' words for the coverage term).
_COLUMNS = (
    "n.id, n.scope_id, n.path, n.title, n.body, n.valid_from, n.invalid_at, n.verified,"
    " n.source_events, n.author, coalesce(tsvector_to_array(n.search), ARRAY[]::text[])"
)
_NAMES = (
    "id",
    "scope_id",
    "path",
    "title",
    "body",
    "valid_from",
    "invalid_at",
    "verified",
    "source_events",
    "author",
    "lexemes",
)
_VALID = (
    "n.scope_id = ANY(%s) AND n.valid_from <= %s AND (n.invalid_at IS NULL OR n.invalid_at > %s)"
)


@dataclass(frozen=True)
class _Scopes:
    """What one query tells of the scopes searched: their ids, how many notes they hold, how
    many of those hold each of the query's words, and how many notes the whole index holds."""

    ids: list[int]
    names: dict[int, str]  # id → name
    size: int
    counts: dict[str, int]  # the query's words (stemmed, at most MAX_WORDS) → notes holding them
    total: int
    tokens: list[tuple[str, list[str]]]  # the query split at spaces, each with its words


def _meaning(found: _Scopes) -> str:
    """The query without its words common in the scopes (in more than `COMMON_FRACTION` of
    their notes), for the embedding: a name most notes carry would otherwise pull the nearest
    notes towards everything said by or of that person, whatever the question asks. The
    coverage term of the fusion gives those words their say back.

    Its cost grows with its tokens: a question longer than `MEANING_WORDS` words (once those
    are out) also loses the words the full text leaves out (the, did, what…), then its end."""
    common = max(COMMON_FRACTION * found.size, MIN_COMMON)
    kept = [
        (token, lexemes)
        for token, lexemes in found.tokens
        if not any(found.counts.get(lexeme, 0) > common for lexeme in lexemes)
    ]
    if len(kept) > MEANING_WORDS:
        kept = [(token, lexemes) for token, lexemes in kept if lexemes]
    return " ".join(token for token, _lexemes in kept[:MEANING_WORDS])


def _look_up(query: str, names: list[str]) -> _Scopes | None:
    """The scopes' ids and sizes and the query's word counts, read from `memory_wordcount` (kept
    by triggers): one round trip that counts no note, so its cost follows the query's words, not
    the scopes' sizes. None when no scope asked exists. A backslash would need escaping of its
    own in a tsquery: a word holding one is left out."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH s AS (SELECT id, name FROM memory_scope WHERE name = ANY(%s)),
            q AS (
                SELECT '' AS lexeme
                UNION ALL (
                    SELECT DISTINCT lexeme FROM unnest(to_tsvector(%s::regconfig, %s))
                    WHERE strpos(lexeme, E'\\\\') = 0 ORDER BY lexeme LIMIT %s
                )
            )
            SELECT q.lexeme,
                   (SELECT coalesce(sum(c.notes), 0) FROM memory_wordcount c
                    WHERE c.scope_id IN (SELECT id FROM s) AND c.word = q.lexeme),
                   (SELECT jsonb_object_agg(id, name) FROM s),
                   (SELECT coalesce(sum(notes), 0) FROM memory_wordcount WHERE word = ''),
                   (SELECT jsonb_agg(jsonb_build_array(t, array(
                        SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, t))
                    )) ORDER BY i) FROM unnest(string_to_array(%s, ' ')) WITH ORDINALITY AS x(t, i))
            FROM q
            """,
            [names, TEXT_SEARCH, query, MAX_WORDS, TEXT_SEARCH, query],
        )
        rows = cursor.fetchall()
    named: dict[str, str] | None = _json(rows[0][2])  # jsonb keys are text
    if not named:
        return None
    counts = {lexeme: int(count) for lexeme, count, *_rest in rows}
    size = counts.pop("")
    tokens = _json(rows[0][4])
    return _Scopes(
        ids=sorted(int(i) for i in named),
        names={int(i): name for i, name in named.items()},
        size=size,
        counts=counts,
        total=int(rows[0][3]),
        tokens=[(token, lexemes) for token, lexemes in tokens],
    )


def _full_text(found: _Scopes, moment: datetime) -> list[dict[str, Any]]:
    """Notes ranked by the rare query words they contain, each weighing its inverse document
    frequency in the scopes searched (a word in most notes — a name every message starts
    with — says little and would flood the candidates). Only words in at most
    `MAX_RARE_MATCHES` notes are looked up, so the cost follows their matches, not the size of
    the scopes; the query's other words still rank those matches, each by its own weight.
    ("What held up Melanie's move?" among 100,000 notes: "move" is in 1,750 of them, so the
    matches are Melanie's 185 notes; the answer, which also says "moved", rises among them from
    past the 50 kept to third.)"""
    counts, size = found.counts, found.size
    if not counts:
        return []
    common = min(max(int(COMMON_FRACTION * size), MIN_COMMON), MAX_RARE_MATCHES)
    rare = []
    matches = 0
    for lexeme in sorted(counts, key=lambda lexeme: counts[lexeme]):
        if 0 < counts[lexeme] <= common and matches + counts[lexeme] <= MAX_MATCHES:
            rare.append(lexeme)
            matches += counts[lexeme]
    with connection.cursor() as cursor:
        if not rare:  # only common words: all of them must be there
            return _matching(cursor, " & ".join(_quoted(list(counts))), found.ids, moment, [], [])
        # Realistic set padded to 100,000 notes: hit@10 0.858 -> 0.859, MRR 0.687 -> 0.693
        # (the padded conversation 130 -> 131 of 155); the large set unchanged.
        ranking = rare + [lexeme for lexeme in counts if counts[lexeme] and lexeme not in rare]
        weights = [math.log((size + 1) / (counts[lexeme] + 0.5)) for lexeme in ranking]
        return _matching(cursor, " | ".join(_quoted(rare)), found.ids, moment, ranking, weights)


def _matching(
    cursor: Any,
    tsquery: str,
    scope_ids: list[int],
    moment: datetime,
    lexemes: list[str],
    weights: list[float],
) -> list[dict[str, Any]]:
    """Notes matching `tsquery`, best first: the summed weights of the `lexemes` they hold,
    then the density of the match."""
    weighted = (
        " + ".join(
            "(CASE WHEN n.search @@ to_tsquery(%s::regconfig, quote_literal(%s))"
            " THEN %s ELSE 0 END)"
            for _ in lexemes
        )
        or "0"
    )
    arguments: list[Any] = []
    for lexeme, weight in zip(lexemes, weights, strict=True):
        arguments += [TEXT_SEARCH, lexeme, weight]
    # The notes' fields are read for the best only, not for every note matched.
    cursor.execute(
        f"""
        SELECT {_COLUMNS} FROM (
            SELECT n.id, {weighted} + ts_rank_cd(n.search, q) AS score, n.valid_from
            FROM memory_note n, to_tsquery(%s::regconfig, %s) q
            WHERE n.search @@ q AND {_VALID}
            ORDER BY score DESC, n.valid_from DESC
            LIMIT %s
        ) best JOIN memory_note n ON n.id = best.id
        ORDER BY best.score DESC, best.valid_from DESC
        """,  # noqa: S608  # constant fragments only; the words are parameters
        [*arguments, TEXT_SEARCH, tsquery, scope_ids, moment, moment, CANDIDATES],
    )
    return _fetched(cursor)


def _quoted(lexemes: list[str]) -> list[str]:
    return ["'" + lexeme.replace("'", "''") + "'" for lexeme in lexemes]


def _literal(embedded: Iterable[float]) -> str:
    """A vector as pgvector reads it."""
    return "[" + ",".join(f"{x:.7g}" for x in embedded) + "]"


def _nearest(vector: str, found: _Scopes, moment: datetime) -> list[dict[str, Any]]:
    """The nearest notes by cosine. pgvector's HNSW index filters *after* its scan (0.6 has no
    iterative scan): of its `ef_search` neighbours, about the scopes' share of the index is
    theirs. So: an exact scan (a sort of the scopes' vectors, cheap while they are few) up to
    `EXACT_UP_TO` notes, or when the scopes are too small a share of the index for any beam;
    otherwise the index with a beam widened by the scopes' share of it, and the exact scan
    again if it still returned too few."""
    arguments: list[Any] = [found.ids, moment, moment, vector, NEAREST]
    # `SET LOCAL` lasts for a transaction: outside one it is a no-op, and the index's default
    # beam (40) would return too few, sending every search to the exact scan.
    with transaction.atomic(), connection.cursor() as cursor:
        share = found.size / max(found.total, found.size)
        # A beam past pgvector's bound would bring back too few of the scopes' notes (a small
        # scope in a large index): the exact scan straight away, not after the index's.
        if found.size > EXACT_UP_TO and math.ceil(MIN_BEAM / share) <= MAX_BEAM:
            beam = min(math.ceil(BEAM / share), MAX_BEAM)
            cursor.execute("SET LOCAL hnsw.ef_search = %s", [beam])
            cursor.execute(_NEAREST.format(distance="n.embedding <=> %s::vector"), arguments)
            found_rows = _fetched(cursor)
            if len(found_rows) == NEAREST:
                return found_rows
        # `+ 0`: an expression the index cannot serve, so the planner sorts exactly.
        cursor.execute(_NEAREST.format(distance="(n.embedding <=> %s::vector) + 0"), arguments)
        return _fetched(cursor)


_NEAREST = (  # constant fragments only
    f"SELECT {_COLUMNS} FROM memory_note n WHERE n.embedding IS NOT NULL AND "  # noqa: S608
    + _VALID
    + " ORDER BY {distance} LIMIT %s"
)


# The `CONTEXT_NOTES` notes its writer put in a nearest note's scope just before it, or just
# after it, within `CONTEXT_MINUTES`: the closest in time first, a few entries of the index on
# the writer's times (`memory_note_writer_time`). A note without its vector yet is read too (its
# closeness NULL): skipping it in the index would read on through a batch written at once.
_AROUND = """
    SELECT n.id FROM memory_note n
    WHERE n.scope_id = s.scope_id AND n.author = s.author
      AND n.valid_from <= %(moment)s AND (n.invalid_at IS NULL OR n.invalid_at > %(moment)s)
      AND n.valid_from {within} make_interval(mins => %(minutes)s)
      AND (n.valid_from, n.id) {side} (s.valid_from, s.id)
    ORDER BY n.valid_from {order}, n.id {order} LIMIT %(notes)s
"""
_BEFORE = _AROUND.format(within=">= s.valid_from -", side="<", order="DESC")
_AFTER = _AROUND.format(within="<= s.valid_from +", side=">", order="ASC")
# Only what the ranking needs of the 150 or so notes it reads: those that make the list without
# being among the nearest are read whole afterwards (`_BY_ID`).
_CONTEXT = f"""
    SELECT n.id, n.scope_id, n.author, n.valid_from, 1 - (n.embedding <=> %(vector)s::vector),
           near.candidate
    FROM memory_note s
    CROSS JOIN LATERAL (
        SELECT s.id, true AS candidate
        UNION ALL (SELECT id, false FROM ({_BEFORE}) b)
        UNION ALL (SELECT id, true FROM ({_AFTER}) a)
    ) near
    JOIN memory_note n ON n.id = near.id
    WHERE s.id = ANY(%(nearest)s)
"""  # noqa: S608  # constant fragments only; the values are parameters
_IN_CONTEXT = ("id", "scope_id", "author", "valid_from", "closeness", "candidate")
_BY_ID = f"SELECT {_COLUMNS} FROM memory_note n WHERE n.id = ANY(%s)"  # noqa: S608  # constant


def _in_context(
    vector: str, nearest: list[dict[str, Any]], moment: datetime
) -> list[dict[str, Any]]:
    """The nearest notes and the `CONTEXT_NOTES` written after each, ranked by their closeness
    raised by their context's (see `CONTEXT_WEIGHT`); at most `NEAREST`. One capped read: for
    each nearest note, the notes its writer put in its scope just before and just after it
    (within `CONTEXT_MINUTES`, valid at `moment`), with their closeness to the query: at most
    five notes a nearest one, a few index entries each, whatever the scope's size; then the
    notes that make the list and were not among the nearest, read whole. A note's context is
    the notes just before it in its writer's sequence: a nearest note's are fetched, and a note
    after it has it and what lies between them. A note not embedded yet is neither a candidate
    nor context."""
    if not nearest:
        return nearest
    whole = {row["id"]: row for row in nearest}
    with connection.cursor() as cursor:
        cursor.execute(
            _CONTEXT,
            {
                "vector": vector,
                "moment": moment,
                "minutes": CONTEXT_MINUTES,
                "notes": CONTEXT_NOTES,
                "nearest": list(whole),
            },
        )
        fetched = [dict(zip(_IN_CONTEXT, row, strict=True)) for row in cursor.fetchall()]
    rows: dict[int, dict[str, Any]] = {}
    for row in fetched:  # a note fetched twice is a candidate if either fetch made it one
        candidate = row["candidate"] or rows.get(row["id"], row)["candidate"]
        rows[row["id"]] = row | {"candidate": candidate}
    sequences: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in sorted(rows.values(), key=lambda row: (row["valid_from"], row["id"])):
        sequences.setdefault((row["scope_id"], row["author"]), []).append(row)
    raised: dict[int, float] = {}
    for sequence in sequences.values():
        for place, row in enumerate(sequence):
            own = row["closeness"]
            if not row["candidate"] or own is None:
                continue
            context = [
                earlier["closeness"]
                for earlier in sequence[max(place - CONTEXT_NOTES, 0) : place]
                if earlier["closeness"] is not None
                and row["valid_from"] - earlier["valid_from"] <= timedelta(minutes=CONTEXT_MINUTES)
            ]
            mean = (own + sum(context)) / (1 + len(context))
            raised[row["id"]] = own + CONTEXT_WEIGHT * max(mean - own, 0.0)
    best = sorted(raised, key=lambda note_id: (-raised[note_id], note_id))[:NEAREST]
    unread = [note_id for note_id in best if note_id not in whole]
    if unread:
        with connection.cursor() as cursor:
            cursor.execute(_BY_ID, [unread])
            whole.update((row["id"], row) for row in _fetched(cursor))
    # A note gone between the two reads (a reindex committed) is left out, not an error.
    return [whole[note_id] for note_id in best if note_id in whole]


def _fetched(cursor: Any) -> list[dict[str, Any]]:
    """The candidates a query of `_COLUMNS` returned, in its order."""
    rows = [dict(zip(_NAMES, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        row["lexemes"] = set(row["lexemes"])
    return rows


def _json(value: Any) -> Any:
    """A jsonb value read by a raw cursor: Django has psycopg hand it over as text."""
    return json.loads(value) if isinstance(value, str) else value


def _events(value: Any) -> tuple[int, ...]:
    return tuple(_json(value))


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
