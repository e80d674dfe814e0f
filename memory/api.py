"""Durable memory over /api/v1/memory: the scopes, a scope's notes by pages and its git history,
one note, search, and the owner's own notes, verifications and invalidations.

A scope's name has slashes (project/12, agent/executor). In a path it is taken whole
(`/memory/scopes/project/12/notes`); a note is named by a scope and its path in the scope's
repository as query parameters (`/memory/notes?scope=global&path=notes/2026-03/…md`). Reads go
through `memory.overview`, writes through `memory.curation`, as the console's do; refusals are
`MemoryRefused` errors (400 malformed, 404 unknown, 409 already invalid).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import AwareDatetime, ConfigDict

from agentos.core import audit
from agentos.core.schemas import Text
from memory import curation, overview, search
from memory.models import Note
from memory.notes import MAX_BODY, MAX_TITLE

router = Router(tags=["memory"])

NoteType = Literal["fact", "lesson", "decision", "preference", "procedure", "event"]
SCOPE_DOC = "A memory scope: global, skills, agent/<role> or project/<id>"
PATH_DOC = "The note's path in its scope's repository: notes/YYYY-MM/<id>.md"


class ScopeOut(Schema):
    name: str
    valid: int = Field(description="Notes that hold now")
    invalidated: int = Field(description="Notes invalidated, kept and dated")
    head: str = Field(description="The scope's git commit; empty before the first")
    changed_at: datetime | None = Field(description="Date of that commit")
    shared: bool = Field(description="Agents' writes to it wait for the owner's approval")


class NoteSummaryOut(Schema):
    scope: str
    path: str
    id: str
    type: str
    title: str
    author: str = Field(description="'owner', or the run that wrote it ('run:<id>')")
    source_events: list[int] = Field(description="Journal events the note was drawn from")
    verified: bool = Field(description="True only by an act of the owner on this note")
    verified_by: str = Field(
        description="The owner's act that verified it: 'owner', 'token:<name>' or 'approval'"
        " (an approved proposal); empty when not verified"
    )
    verified_at: datetime | None = Field(description="When; null for an approved proposal's")
    confidence: float
    valid_from: datetime
    invalid_at: datetime | None


class NoteOut(NoteSummaryOut):
    body: str


class EventOut(Schema):
    id: int
    run_id: int | None = Field(description="The run it happened in; null if no longer kept")
    seq: int | None = Field(description="The run's step")


class NoteDetailOut(NoteOut):
    events: list[EventOut] = Field(description="Where each source event happened")


class NotePage(Schema):
    scope: str
    total: int = Field(description="How many notes the filter matches in all")
    limit: int
    offset: int
    items: list[NoteSummaryOut]


class NotesFilter(Schema):
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0, le=10**9)
    valid: bool = Field(
        True,
        description="true: notes that hold (newest first); false: invalidated ones (latest"
        " invalidation first)",
    )


class NoteQuery(Schema):
    scope: Text = Field(max_length=300, description=SCOPE_DOC)
    path: Text = Field(max_length=300, description=PATH_DOC)


class SearchQuery(Schema):
    q: Text = Field(min_length=1, max_length=search.MAX_QUERY)
    scope: Text = Field("", max_length=300, description=f"{SCOPE_DOC}; empty for every scope")
    as_of: AwareDatetime | None = Field(None, description="What memory held then; now if absent")
    k: int = Field(10, ge=1, le=100)


class HitOut(Schema):
    scope: str
    path: str
    title: str
    snippet: str
    score: float
    valid_from: datetime
    invalid_at: datetime | None
    verified: bool
    source_events: list[int]


class CommitOut(Schema):
    id: str
    at: datetime
    subject: str


class HistoryQuery(Schema):
    limit: int = Field(50, ge=1, le=500)


class NoteIn(Schema):
    model_config = ConfigDict(extra="forbid")

    scope: Text = Field(max_length=300, description=SCOPE_DOC)
    title: Text = Field(min_length=1, max_length=MAX_TITLE)
    body: Text = Field("", max_length=MAX_BODY)
    type: NoteType = "fact"
    valid_from: AwareDatetime | None = Field(None, description="When it holds from; now if absent")


class VerifyIn(Schema):
    model_config = ConfigDict(extra="forbid")

    scope: Text = Field(max_length=300, description=SCOPE_DOC)
    path: Text = Field(max_length=300, description=PATH_DOC)


class InvalidateIn(Schema):
    model_config = ConfigDict(extra="forbid")

    scope: Text = Field(max_length=300, description=SCOPE_DOC)
    path: Text = Field(max_length=300, description=PATH_DOC)
    reason: Text = Field(min_length=1, max_length=curation.MAX_REASON)


def note_out(note: Note, *, scope: str, body: bool = True) -> dict[str, Any]:
    out = {
        "scope": scope,
        "path": note.path,
        "id": note.note_id,
        "type": note.type,
        "title": note.title,
        "author": note.author,
        "source_events": list(note.source_events),
        "verified": note.verified,
        "verified_by": note.verified_by,
        "verified_at": note.verified_at,
        "confidence": note.confidence,
        "valid_from": note.valid_from,
        "invalid_at": note.invalid_at,
    }
    if body:
        out["body"] = note.body
    return out


@router.get("/memory/scopes", response=list[ScopeOut], summary="Memory scopes, by name")
def list_scopes(request: HttpRequest) -> list[overview.ScopeSummary]:
    return overview.scopes()


@router.get(
    "/memory/scopes/{path:scope}/notes",
    response=NotePage,
    summary="A scope's notes by pages, without their text (the scope's slashes as they are:"
    " /memory/scopes/project/12/notes)",
)
def list_notes(request: HttpRequest, scope: str, filters: Query[NotesFilter]) -> dict[str, Any]:
    row = overview.current(scope)
    notes, total = overview.notes_of(
        row, ended=not filters.valid, limit=filters.limit, offset=filters.offset
    )
    return {
        "scope": row.name,
        "total": total,
        "limit": filters.limit,
        "offset": filters.offset,
        "items": [note_out(note, scope=row.name, body=False) for note in notes],
    }


@router.get(
    "/memory/scopes/{path:scope}/history",
    response=list[CommitOut],
    summary="A scope's newest git commits (the scope's slashes as they are:"
    " /memory/scopes/project/12/history)",
)
def scope_history(
    request: HttpRequest, scope: str, filters: Query[HistoryQuery]
) -> list[overview.Commit]:
    return overview.history(scope, limit=filters.limit)


@router.get(
    "/memory/notes",
    response=NoteDetailOut,
    summary="One note, with its text and where its source events happened (scope and path as"
    " query parameters)",
)
def get_note(request: HttpRequest, filters: Query[NoteQuery]) -> dict[str, Any]:
    note = overview.note(filters.scope, filters.path)
    places = overview.event_places(note.source_events)
    events = []
    for event in note.source_events:
        run_id, seq = places.get(event, (None, None))
        events.append({"id": event, "run_id": run_id, "seq": seq})
    return {**note_out(note, scope=note.scope.name), "events": events}


@router.get(
    "/memory/search",
    response=list[HitOut],
    summary="Search notes by words and meaning, in one scope or all, as of a moment",
)
def search_notes(request: HttpRequest, filters: Query[SearchQuery]) -> list[search.Hit]:
    return overview.find(filters.q, scope=filters.scope, as_of=filters.as_of, k=filters.k)


@router.post(
    "/memory/notes",
    response={201: NoteOut},
    summary="Add the owner's note to a scope (verified, author 'owner'); the same note twice is"
    " one note",
)
def add_note(request: HttpRequest, payload: NoteIn) -> Status[dict[str, Any]]:
    note = curation.add_note(
        scope=payload.scope,
        title=payload.title,
        body=payload.body,
        type=payload.type,
        valid_from=payload.valid_from,
        actor=audit.Actor.of(request),
    )
    return Status(201, note_out(note, scope=note.scope.name))


@router.post(
    "/memory/notes/verify",
    response=NoteOut,
    summary="Verify a note: the owner's act that makes it knowledge later runs are given (as data"
    " saying who wrote it); 409 if already verified or no longer holding",
)
def verify_note(request: HttpRequest, payload: VerifyIn) -> dict[str, Any]:
    note = curation.verify_note(
        scope=payload.scope, path=payload.path, actor=audit.Actor.of(request)
    )
    return note_out(note, scope=note.scope.name)


@router.post(
    "/memory/notes/invalidate",
    response=NoteOut,
    summary="Mark a note as no longer holding from now, with a reason (it is kept, dated)",
)
def invalidate_note(request: HttpRequest, payload: InvalidateIn) -> dict[str, Any]:
    note = curation.invalidate_note(
        scope=payload.scope, path=payload.path, reason=payload.reason, actor=audit.Actor.of(request)
    )
    return note_out(note, scope=note.scope.name)
