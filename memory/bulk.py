"""A scope's notes in bulk: read from a commit of its repository in one `git cat-file --batch`
stream, and put in its index through one COPY into a staging table, from which large
INSERT … SELECT statements make the rows with the vectors the embedding cache holds for their
text — a rebuilt note is written once, vector included, instead of inserted and updated (every
row update is a new row version in the HNSW, GIN and B-tree indexes, which the index of every
scope shares).

What catching an index up (`store._catch_up`) and rebuilding it (`memory.reindexing`) share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection

from memory import embeddings, graph, notes, repository
from memory.models import Scope
from memory.progress import Progress

# Rows per INSERT … SELECT: each statement fires the word-count triggers of memory migration
# 0004 once, over its rows; the progress bar moves between two.
CHUNK = 5000
STAGED = "memory_staged_notes"
# What the trigger of memory migration 0002 makes of a staged row's text (kept equal to it).
SEARCH = (
    "(setweight(to_tsvector('english'::regconfig, coalesce(s.title, '')), 'A')"
    " || setweight(to_tsvector('english'::regconfig, coalesce(s.body, '')), 'B'))"
)
COLUMNS = (
    "path",
    "blob",
    "note_id",
    "type",
    "title",
    "body",
    "author",
    "source_events",
    "verified",
    "verified_by",
    "verified_at",
    "confidence",
    "valid_from",
    "invalid_at",
)


@dataclass(frozen=True)
class Entry:
    """One note file of a commit: where, which version, what it says."""

    path: str
    blob: str
    note: notes.Note

    @property
    def text(self) -> str:
        return embeddings.text_of(self.note.title, self.note.body)


@dataclass(frozen=True)
class Tree:
    """The notes of one commit of a scope."""

    tip: str
    entries: list[Entry]


def note_files(scope: str, commit_id: str) -> dict[str, str]:
    """The note files of the commit: path -> blob id."""
    return {
        path: blob
        for path, blob in repository.files(scope, commit_id, notes.NOTES_DIR).items()
        if path.startswith(notes.NOTES_DIR + "/") and path.endswith(".md")
    }


def read(scope: str, files: dict[str, str], progress: Progress | None = None) -> list[Entry]:
    """The notes of `files` (path -> blob id), each blob read once (two paths may hold the same
    bytes). `NoteError` for a file that is not a note."""
    progress = progress or Progress.quiet()
    by_blob: dict[str, list[str]] = {}
    for path, blob in files.items():
        by_blob.setdefault(blob, []).append(path)
    entries = []
    for blob, content in repository.read(scope, list(by_blob)):
        text = content.decode()
        for path in by_blob[blob]:
            entries.append(Entry(path, blob, notes.parse(text, path=path)))
        progress.advance(len(by_blob[blob]))
    return entries


def insert(row: Scope, entries: Sequence[Entry], progress: Progress | None = None) -> None:
    """The entries as new rows of the scope (none of their paths indexed yet), each with its
    text's vector when the cache has it. Inside the caller's transaction (the scope's lock
    held): the staging table goes with it."""
    _write(row, entries, progress, keep=False)


def replace(row: Scope, entries: Sequence[Entry], progress: Progress | None = None) -> None:
    """The scope's rows made those of `entries`, as `insert` makes them into an empty scope:
    a row already equal to the one it would be — every column, its vector the cache's, its
    words what the trigger of migration 0002 makes of its text — is kept as it is, the others
    deleted and inserted anew. Inserting a vector into the HNSW index is what a rebuilt row
    costs most (nine tenths, measured at 20,000 notes); unchanged text costs a comparison."""
    _write(row, entries, progress, keep=True)


def _write(row: Scope, entries: Sequence[Entry], progress: Progress | None, *, keep: bool) -> None:
    progress = progress or Progress.quiet()
    if not entries and not keep:
        return
    columns = ", ".join(COLUMNS)
    same = " AND ".join(f"n.{c} IS NOT DISTINCT FROM s.{c}" for c in COLUMNS)
    with connection.cursor() as cursor:
        # Temporary: this session's alone, so concurrent reindexes of two scopes never meet.
        cursor.execute(
            f"""
            CREATE TEMPORARY TABLE {STAGED} (
                n integer, path text, blob text, note_id text, type text, title text, body text,
                author text, source_events jsonb, verified boolean, verified_by text,
                verified_at timestamptz, confidence double precision, valid_from timestamptz,
                invalid_at timestamptz, digest text
            ) ON COMMIT DROP
            """
        )
        with cursor.copy(f"COPY {STAGED} (n, {columns}, digest) FROM STDIN") as copy:
            for number, row_of in enumerate(_values(entries)):
                copy.write_row((number, *row_of))
        cursor.execute(f"ANALYZE {STAGED}")  # no autovacuum on a temporary table
        if keep:
            cursor.execute(
                f"""
                DELETE FROM memory_note n WHERE n.scope_id = %s AND NOT EXISTS (
                    SELECT FROM {STAGED} s
                    LEFT JOIN memory_embeddingcache c ON c.model = %s AND c.digest = s.digest
                    WHERE s.path = n.path AND {same}
                      AND n.embedding IS NOT DISTINCT FROM c.vector
                      AND n.search IS NOT DISTINCT FROM {SEARCH}
                )
                """,  # noqa: S608  # constants only; the values are parameters
                [row.pk, embeddings.MODEL],
            )
        writing = 0  # rows to insert, counted only where they may be enough to rebuild the graph
        if len(entries) >= graph.REBUILT_FROM:
            cursor.execute(
                f"""
                SELECT count(*) FROM {STAGED} s WHERE NOT EXISTS (
                    SELECT FROM memory_note n WHERE n.scope_id = %s AND n.path = s.path
                )
                """,  # noqa: S608  # constants only
                [row.pk],
            )
            (writing,) = cursor.fetchone()
        with graph.built_after(writing, progress):
            for start in range(0, len(entries), CHUNK):
                cursor.execute(
                    f"""
                    INSERT INTO memory_note (scope_id, {columns}, embedding)
                    SELECT %s, {", ".join(f"s.{c}" for c in COLUMNS)}, c.vector
                    FROM {STAGED} s
                    LEFT JOIN memory_embeddingcache c ON c.model = %s AND c.digest = s.digest
                    WHERE s.n >= %s AND s.n < %s
                      AND NOT EXISTS (
                          SELECT FROM memory_note n WHERE n.scope_id = %s AND n.path = s.path
                      )
                    """,  # noqa: S608  # constants only; the values are parameters
                    [row.pk, embeddings.MODEL, start, start + CHUNK, row.pk],
                )
                progress.advance(min(CHUNK, len(entries) - start))
            cursor.execute(f"DROP TABLE {STAGED}")


def _values(entries: Iterable[Entry]) -> Iterable[tuple[object, ...]]:
    for entry in entries:
        note = entry.note
        yield (
            entry.path,
            entry.blob,
            note.id,
            note.type,
            note.title,
            note.body,
            note.author,
            _json_list(note.source_events),
            note.verified,
            note.verified_by,
            note.verified_at,
            note.confidence,
            note.valid_from,
            note.invalid_at,
            embeddings.digest(entry.text),
        )


def _json_list(numbers: Sequence[int]) -> str:
    # What Django's JSONField stores for a list of ints (the index must equal a written one's).
    return "[" + ", ".join(str(int(number)) for number in numbers) + "]"
