"""Writing memory: notes added and invalidated in their scope's repository, the index kept equal.

The repository is the truth. A write takes the scope's lock (a PostgreSQL advisory lock held by
the write's transaction), brings the index up to the repository's tip (`sync`), inserts the new
rows, commits to the repository, and records the new tip with the rows. A process killed at any
point leaves either nothing, or a repository one commit ahead of its index — which the next
write, `sync` or `manage.py memory_reindex` catches up. A retried write adds nothing twice: a
note's file name derives from what it says.

Every title and body goes through the scrubber first: no secret the product knows, and nothing
shaped like one, reaches a note.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from agentos.core import scrubber
from memory import bulk, embeddings, notes, repository
from memory.models import Note, Scope
from memory.notes import NoteError
from memory.progress import Progress

BATCH = 2000


@dataclass(frozen=True)
class Draft:
    title: str
    body: str
    type: str = "fact"
    valid_from: datetime | None = None  # None: now
    source_events: tuple[int, ...] = ()
    # The owner's act that verifies it (`notes.check_verifier`); only the owner's own writes
    # (`memory.curation`) and an approved proposal (`propose`, `land`) set it.
    verified_by: str = ""
    verified_at: datetime | None = None
    confidence: float = 0.5


def write(scope: str, drafts: Sequence[Draft], *, author: str, message: str) -> list[str]:
    """One commit adding every draft as a note; the notes' paths, in the drafts' order. A draft
    already in the scope (the same title, body, type and time) is not added again."""
    notes.check_scope(scope)
    now = timezone.now()
    made = [_made(draft, author, now) for draft in drafts]
    if not made:
        return []
    with locked(scope) as row:
        present = set(
            Note.objects.filter(scope=row, path__in=[note.path for note in made]).values_list(
                "path", flat=True
            )
        )
        fresh = list({note.path: note for note in made if note.path not in present}.values())
        if fresh:
            _commit(row, fresh, _message(message, author, fresh))
    _embed_later()
    return [note.path for note in made]


def holds(scope: str, draft: Draft, *, author: str) -> bool:
    """Whether the scope's index has the note `write` would make of `draft` (one with a
    `valid_from`: the time is part of a note's name)."""
    if draft.valid_from is None:
        raise NoteError("Only a draft with its time names a note before it is written.")
    note = _made(draft, author, draft.valid_from)
    return Note.objects.filter(scope__name=scope, path=note.path).exists()


def invalidate(
    scope: str,
    path: str,
    *,
    at: datetime | None = None,
    author: str,
    reason: str,
    source_events: Sequence[int] = (),
    tolerate_invalid: bool = False,
) -> notes.Note:
    """The note at `path` marked as no longer holding from `at` (now by default): its header's
    `invalid_at` set, its text kept. `NoteError` if it does not exist or is already invalid
    (unless `tolerate_invalid`: then the note as it is, for a retried call)."""
    notes.check_scope(scope)
    with locked(scope) as row:
        indexed = Note.objects.filter(scope=row, path=path).first()
        if indexed is None:
            raise NoteError(f"No note {path} in {scope}.")
        if indexed.invalid_at is not None and tolerate_invalid:
            return _note_of(indexed)
        ended = _note_of(indexed).invalidated(at or timezone.now())
        events = sorted({*ended.source_events, *source_events})
        summary = f"Invalidate {path}: {scrubber.scrub(reason)}"
        _commit(row, [ended], _message(summary, author, [ended], events), replace=True)
    return ended


SHARED = ("global", "skills", "agent")  # scopes whose writes wait for the owner's approval
PROPOSALS = "refs/heads/proposals/"


def shared(scope: str) -> bool:
    """Whether writes to `scope` are proposals the owner approves (global memory, skills,
    agent manuals), rather than a project's own."""
    return scope.split("/", 1)[0] in SHARED


@dataclass(frozen=True)
class Proposal:
    branch: str
    path: str
    valid_from: datetime  # what `land` is given back, so it lands the very note proposed
    diff: str


def propose(scope: str, draft: Draft, *, author: str, replaces: str = "") -> Proposal:
    """The draft (and the invalidation of `replaces`) committed on a proposals branch of its own
    on top of the scope's tip, and the diff the owner approves. Nothing reaches the index; the
    same draft proposes the same branch. The note is shown verified by the approval: what the
    owner approves is what lands, byte for byte."""
    notes.check_scope(scope)
    note = _made(_approved(draft), author, timezone.now())
    with locked(scope) as row:
        changes, diff = [], []
        if replaces:
            indexed = Note.objects.filter(scope=row, path=replaces).first()
            if indexed is None:
                raise NoteError(f"No note {replaces} in {scope}.")
            old = _note_of(indexed)
            new = old.invalidated(note.valid_from)
            changes.append(repository.Change(replaces, new.render().encode()))
            diff.append(_diff(replaces, old.render(), new.render()))
        changes.append(repository.Change(note.path, note.render().encode()))
        diff.append(_diff(note.path, "", note.render()))
        branch = f"{PROPOSALS}{note.id}"
        if not repository.head(scope, branch):
            summary = f"Proposal: {note.title}"
            repository.commit(
                scope, row.head, changes, _message(summary, author, [note]), branch=branch
            )
    return Proposal(branch=branch, path=note.path, valid_from=note.valid_from, diff="".join(diff))


def land(scope: str, draft: Draft, *, author: str, replaces: str = "") -> str:
    """An approved proposal written to the scope (idempotent: the same draft, the same note),
    its branch dropped; the note's path. `draft.valid_from` is the proposal's."""
    proposed = draft.valid_from
    if proposed is None:
        raise NoteError("A proposal lands with the time it was proposed at.")
    draft = _approved(draft)
    note = _made(draft, author, proposed)
    if replaces:
        current = Note.objects.filter(scope__name=scope, path=replaces).first()
        if current is not None and current.invalid_at is None:
            invalidate(scope, replaces, at=note.valid_from, author=author,
                       reason=f"replaced by {note.path}")  # fmt: skip
    (path,) = write(scope, [draft], author=author, message=f"Approved: {note.title}")
    repository.drop(scope, f"{PROPOSALS}{note.id}")
    return path


def _approved(draft: Draft) -> Draft:
    """A proposal's note: verified by the owner's approval of it, the only act that lands it."""
    return dataclasses.replace(draft, verified_by=notes.APPROVAL, verified_at=None)


def verify(scope: str, path: str, *, by: str, at: datetime | None = None) -> notes.Note:
    """The note at `path` marked verified by the owner's act `by` (`notes.check_verifier`), at
    `at` (now by default): a header change in one commit. `NoteError` if there is no such note,
    it no longer holds, or it is already verified."""
    notes.check_scope(scope)
    notes.check_verifier(by)
    with locked(scope) as row:
        indexed = Note.objects.filter(scope=row, path=path).first()
        if indexed is None:
            raise NoteError(f"No note {path} in {scope}.")
        if indexed.invalid_at is not None:
            raise NoteError(f"{path} no longer holds (since {indexed.invalid_at.isoformat()}).")
        verified = _note_of(indexed).verified_by_owner(by, at or timezone.now())
        _commit(row, [verified], _message(f"Verify {path}", by, []), replace=True)
    _embed_later()  # the row is made anew: its vector comes back from the cache
    return verified


def unverify(scope: str, paths: Collection[str], *, author: str, why: str) -> None:
    """The notes of `paths` no longer verified, in one commit saying `why` (memory migration
    0005: notes verified by citing events, which no act of the owner verified)."""
    with locked(scope) as row:
        amend(row, ended={}, unverified=set(paths), summary=why, author=author, events=[])
    _embed_later()


def drop_proposals(scope: str, *, keep: Collection[str]) -> list[str]:
    """The proposals branches of `scope` but those in `keep` (the ones still waiting for the
    owner) deleted: a refused or expired proposal leaves nothing behind. Safe at any moment: an
    approved proposal lands from its draft, never from its branch. The branches dropped."""
    dropped = [b for b in repository.branches(scope, PROPOSALS) if b not in keep]
    for branch in dropped:
        repository.drop(scope, branch)
    return dropped


def replace(scope: str, old: str, draft: Draft, *, author: str) -> list[str]:
    """One commit: the note at `old` invalidated from the new note's time, and `draft` added —
    an edit by delta, never a rewrite. Retried, it changes nothing more."""
    notes.check_scope(scope)
    note = _made(draft, author, timezone.now())
    with locked(scope) as row:
        indexed = Note.objects.filter(scope=row, path=old).first()
        if indexed is None:
            raise NoteError(f"No note {old} in {scope}.")
        written = []
        if indexed.invalid_at is None:
            written.append(_note_of(indexed).invalidated(note.valid_from))
        if not Note.objects.filter(scope=row, path=note.path).exists():
            written.append(note)
        if written:
            summary = f"Replace {old} by {note.path}: {note.title}"
            _commit(row, written, _message(summary, author, written), replace=True)
    _embed_later()
    return [note.path]


def read_file(scope: str, path: str) -> str:
    """A note's file, or the scope's index, as its repository holds them now."""
    notes.check_scope(scope)
    if path != notes.INDEX_FILE and not path.startswith(notes.NOTES_DIR + "/"):
        raise NoteError(f"{path} is not a note of {scope}.")
    tip = repository.head(scope)
    try:
        if not tip:
            raise repository.RepositoryError("no commit yet")
        ((_spec, content),) = repository.read(scope, [f"{tip}:{path}"])
    except repository.RepositoryError:
        raise NoteError(f"No note {path} in {scope}.") from None
    return content.decode()


def sync(scope: str) -> Scope:
    """The index of `scope` brought to its repository's tip."""
    with locked(scope) as row:
        return row


def reindex(scope: str, *, read: bulk.Tree | None = None, progress: Progress | None = None) -> int:
    """The scope's index rebuilt from its repository alone, in one transaction (searches see
    the old rows until it commits; a row equal to its rebuilt self is kept: `bulk.replace`);
    how many notes it holds. `read`: the scope's notes at one of its commits, read beforehand
    (`memory.reindexing`: outside the lock); the index is then caught up from that commit to
    the tip."""
    notes.check_scope(scope)
    progress = progress or Progress.quiet()
    with transaction.atomic():
        _lock(scope)
        row, _created = Scope.objects.get_or_create(name=scope)
        if read is None:
            tip = repository.head(scope)
            files = bulk.note_files(scope, tip)
            progress.phase("reading the repository", len(files))
            read = bulk.Tree(tip, bulk.read(scope, files, progress))
        progress.phase("indexing rows", len(read.entries))
        bulk.replace(row, read.entries, progress)
        row.head = read.tip
        _catch_up(row)
        row.save()
    progress.finish()
    return Note.objects.filter(scope=row).count()


def amend(
    row: Scope,
    *,
    ended: dict[str, tuple[datetime, str]],
    unverified: Collection[str] = (),
    summary: str,
    author: str,
    events: Sequence[int],
) -> None:
    """Header changes only, in one commit, inside the scope's lock (`locked`): the notes of
    `ended` invalidated at their time (with their reason in the commit message), those of
    `unverified` no longer verified (what no act of the owner verified)."""
    changed: dict[str, notes.Note] = {}
    reasons = []
    for indexed in Note.objects.filter(scope=row, path__in=[*ended, *unverified]):
        note = _note_of(indexed)
        if indexed.path in ended:
            at, reason = ended[indexed.path]
            note = note.invalidated(max(at, note.valid_from))
            reasons.append(f"- {indexed.path}: {reason}")
        if indexed.path in unverified:
            note = dataclasses.replace(note, verified=False, verified_by="", verified_at=None)
            reasons.append(f"- {indexed.path}: unverified, no act of the owner verified it")
        changed[indexed.path] = note
    if not changed:
        return
    message = _message(summary, author, [], events)
    message = message.replace("\nAuthor:", "\n" + "\n".join(reasons[:500]) + "\nAuthor:", 1)
    _commit(row, list(changed.values()), message, replace=True)


def _made(draft: Draft, author: str, now: datetime) -> notes.Note:
    return notes.new_note(
        title=scrubber.scrub(draft.title),
        body=scrubber.scrub(draft.body),
        type=draft.type,
        author=author,
        valid_from=draft.valid_from or now,
        source_events=draft.source_events,
        verified_by=draft.verified_by,
        verified_at=draft.verified_at,
        confidence=draft.confidence,
    )


def _diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}" if old else "/dev/null",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


# --- inside the scope's lock ------------------------------------------------------------------


class locked:
    """The scope's row, its index at the repository's tip, inside a transaction holding the
    scope's lock."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.atomic = transaction.atomic()

    def __enter__(self) -> Scope:
        self.atomic.__enter__()
        try:
            _lock(self.scope)
            row, _created = Scope.objects.get_or_create(name=self.scope)
            _catch_up(row)
            return row
        except BaseException as error:
            self.atomic.__exit__(type(error), error, error.__traceback__)
            raise

    def __exit__(self, *exc: object) -> None:
        self.atomic.__exit__(*exc)  # type: ignore[arg-type]


def _lock(scope: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"memory:{scope}"])


def _catch_up(row: Scope) -> None:
    """Rows equal to the repository's tip: the files that differ from the indexed ones are
    read again (all of them when nothing is indexed), with the vectors the cache has."""
    tip = repository.head(row.name)
    if tip == row.head:
        return
    wanted = bulk.note_files(row.name, tip)
    indexed = dict(Note.objects.filter(scope=row).values_list("path", "blob"))
    gone = [path for path in indexed if path not in wanted]
    changed = {path: blob for path, blob in wanted.items() if indexed.get(path) != blob}
    for start in range(0, len(gone), BATCH):
        Note.objects.filter(scope=row, path__in=gone[start : start + BATCH]).delete()
    Note.objects.filter(scope=row, path__in=[p for p in changed if p in indexed]).delete()
    bulk.insert(row, bulk.read(row.name, changed))
    row.head = tip
    row.save(update_fields=["head", "updated_at"])


def _commit(row: Scope, written: list[notes.Note], message: str, *, replace: bool = False) -> None:
    """Rows first (so the index file can list them), then the repository's commit, then the
    new tip: the transaction commits all three or none of the rows."""
    changes = []
    rows = []
    for note in written:
        content = note.render().encode()
        changes.append(repository.Change(note.path, content))
        rows.append(_row(row, note, repository.blob_id(content)))
    if replace:
        Note.objects.filter(scope=row, path__in=[note.path for note in written]).delete()
    for start in range(0, len(rows), BATCH):
        Note.objects.bulk_create(rows[start : start + BATCH])
    changes.append(repository.Change(notes.INDEX_FILE, _index_file(row).encode()))
    row.head = repository.commit(row.name, row.head, changes, message)
    row.save(update_fields=["head", "updated_at"])


def _index_file(row: Scope) -> str:
    valid = Note.objects.filter(scope=row, invalid_at__isnull=True)
    newest = valid.order_by("-verified", "-valid_from", "path")[: notes.INDEX_LINES]
    return notes.index_text(row.name, [_note_of(n) for n in newest], valid.count())


def _row(scope: Scope, note: notes.Note, blob: str) -> Note:
    return Note(
        scope=scope,
        path=note.path,
        blob=blob,
        note_id=note.id,
        type=note.type,
        title=note.title,
        body=note.body,
        author=note.author,
        source_events=list(note.source_events),
        verified=note.verified,
        verified_by=note.verified_by,
        verified_at=note.verified_at,
        confidence=note.confidence,
        valid_from=note.valid_from,
        invalid_at=note.invalid_at,
    )


def _note_of(row: Note) -> notes.Note:
    return notes.Note(
        id=row.note_id,
        type=row.type,
        title=row.title,
        body=row.body,
        author=row.author,
        valid_from=row.valid_from,
        invalid_at=row.invalid_at,
        verified=row.verified,
        verified_by=row.verified_by,
        verified_at=row.verified_at,
        confidence=row.confidence,
        source_events=tuple(row.source_events),
    )


def _message(
    summary: str, author: str, written: list[notes.Note], events: Sequence[int] = ()
) -> str:
    """A commit message: its summary scrubbed like a note (callers pass titles and reasons)."""
    cited = sorted({*events, *(e for note in written for e in note.source_events)})
    summary = scrubber.scrub(summary).strip()
    lines = [summary.splitlines()[0][:200] if summary else "Memory"]
    lines.append("")
    if len(written) > 1:
        lines.append(f"{len(written)} notes.")
    lines.append(f"Author: {author}")
    if cited:
        lines.append("Source-Events: " + ", ".join(str(e) for e in cited[:200]))
    return "\n".join(lines) + "\n"


def _embed_later() -> None:
    transaction.on_commit(embeddings.schedule)


def prompt_index(scopes: Sequence[str], *, per_scope: int = 40) -> str:
    """The memory index a run starts with (frozen in its input, given to the model as data by
    the engine's `framing`): for each scope, its valid notes the owner verified, newest first,
    one line each with where it came from — who wrote it, which act of the owner verified it.
    Never an unverified one (what came from a web page or a tool's output alone is not put
    before a model as knowledge)."""
    parts = []
    for scope in scopes:
        notes.check_scope(scope)
        rows = Note.objects.filter(scope__name=scope, verified=True, invalid_at__isnull=True)
        newest = list(rows.order_by("-valid_from", "path")[:per_scope])
        if not newest:
            continue
        total = rows.count()
        lines = [f"Scope {scope}:"]
        lines += [
            f"- {n.title} ({n.type}, {n.valid_from:%Y-%m-%d}; written by {n.author}; verified by"
            f" {n.verified_by or notes.OWNER}) — {n.path}"
            for n in newest
        ]
        if total > len(newest):
            lines.append(f"- … and {total - len(newest)} more (memory_search, scope {scope!r}).")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
