"""A note as the memory repository holds it: a Markdown file whose header says what it is, where
it came from and when it held.

    ---
    id: 20261201-deploys-use-blue-green-3fa9c2
    type: "fact"
    title: "Deploys use blue-green"
    author: "run:42"
    source_events: [101, 102]
    verified: false
    verified_by: ""
    verified_at: null
    valid_from: "2026-12-01T10:00:00+00:00"
    invalid_at: null
    confidence: 0.5
    ---
    The body, in Markdown.

Each header value is JSON (so also YAML): parsing is exact and a value cannot break the header.
A note is added, and later invalidated (its `invalid_at` set) or verified; it is never rewritten
otherwise.

A note is verified only by an act of the owner on that very note, which `verified_by` names:
`owner` (the owner wrote it, or verified it on the Memory screen), `token:<name>` (verified through
one of the owner's API tokens), `approval` (the owner approved the proposal whose diff showed it
so). Nothing a run does — citing the owner's events included — verifies a note. Files written
before `verified_by` existed have neither it nor `verified_at`: their owner's notes read as
verified by the owner, and the others were un-verified by migration 0005.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

TYPES = ("fact", "lesson", "decision", "preference", "procedure", "event")
SCOPE = re.compile(r"[a-z0-9_-]{1,64}(?:/[a-z0-9_-]{1,64}){0,3}")
NOTES_DIR = "notes"
INDEX_FILE = "MEMORY.md"
INDEX_LINES = 200
MAX_TITLE = 200
MAX_BODY = 20_000
FIELDS = (
    "id",
    "type",
    "title",
    "author",
    "source_events",
    "verified",
    "verified_by",
    "verified_at",
    "valid_from",
    "invalid_at",
    "confidence",
)
# Headers written before the owner's acts were recorded lack these.
OPTIONAL = ("verified_by", "verified_at")
OWNER = "owner"
# `verified_by` of a note landed by the owner's approval of the proposal that showed it.
APPROVAL = "approval"


class NoteError(ValueError):
    """A note or scope that cannot be written or read, with what is wrong."""


@dataclass(frozen=True)
class Note:
    id: str
    type: str
    title: str
    body: str
    author: str
    valid_from: datetime
    invalid_at: datetime | None = None
    verified: bool = False
    confidence: float = 0.5
    source_events: tuple[int, ...] = field(default=())
    verified_by: str = ""  # the owner's act that verified it (module docstring)
    verified_at: datetime | None = None  # when; None for an approved proposal's (see approvals)

    @property
    def path(self) -> str:
        """Where it lives in its scope's repository: one folder per month of validity keeps
        each tree small."""
        return f"{NOTES_DIR}/{self.valid_from:%Y-%m}/{self.id}.md"

    def valid_at(self, moment: datetime) -> bool:
        return self.valid_from <= moment and (self.invalid_at is None or moment < self.invalid_at)

    def invalidated(self, at: datetime) -> Note:
        if self.invalid_at is not None:
            raise NoteError(f"{self.path} is already invalid since {self.invalid_at.isoformat()}.")
        if at < self.valid_from:
            raise NoteError(f"{self.path} cannot end before it began ({self.valid_from}).")
        return replace(self, invalid_at=at)

    def verified_by_owner(self, by: str, at: datetime | None) -> Note:
        """The note as the owner's act `by` verifies it (one verification: the first act)."""
        if self.verified:
            raise NoteError(f"{self.path} is already verified ({self.verified_by or 'owner'}).")
        return replace(self, verified=True, verified_by=check_verifier(by), verified_at=at)

    def render(self) -> str:
        values = {
            "id": self.id,
            "type": self.type,
            "title": self.title,
            "author": self.author,
            "source_events": list(self.source_events),
            "verified": self.verified,
            "verified_by": self.verified_by,
            "verified_at": self.verified_at.isoformat() if self.verified_at else None,
            "valid_from": self.valid_from.isoformat(),
            "invalid_at": self.invalid_at.isoformat() if self.invalid_at else None,
            "confidence": self.confidence,
        }
        header = "\n".join(
            f"{name}: {json.dumps(values[name], ensure_ascii=False)}" for name in FIELDS
        )
        return f"---\n{header}\n---\n{self.body.rstrip()}\n"


def new_note(
    *,
    title: str,
    body: str,
    type: str,
    author: str,
    valid_from: datetime,
    source_events: tuple[int, ...] = (),
    verified_by: str = "",
    verified_at: datetime | None = None,
    confidence: float = 0.5,
) -> Note:
    """A checked note whose id is derived from what it says and when: writing the same draft
    again names the same file (a retried write is recognised, not doubled). Verified only
    when `verified_by` names the owner's act."""
    title = " ".join(title.split())
    body = body.strip()
    if not title or len(title) > MAX_TITLE:
        raise NoteError(f"A note's title is 1 to {MAX_TITLE} characters.")
    if len(body) > MAX_BODY:
        raise NoteError(f"A note's body is at most {MAX_BODY:,} characters.")
    if type not in TYPES:
        raise NoteError(f"Unknown note type {type!r}; expected one of {', '.join(TYPES)}.")
    if not 0.0 <= confidence <= 1.0:
        raise NoteError("A note's confidence is between 0 and 1.")
    if valid_from.tzinfo is None:
        raise NoteError("A note's valid_from needs a time zone.")
    if any(not isinstance(event, int) or event < 0 for event in source_events):
        raise NoteError("A note's source events are event ids.")
    if verified_by:
        check_verifier(verified_by)
    valid_from = valid_from.astimezone(UTC)
    digest = hashlib.sha256(
        json.dumps([title, body, type, valid_from.isoformat()]).encode()
    ).hexdigest()[:8]
    return Note(
        id=f"{valid_from:%Y%m%d}-{slug(title)}-{digest}",
        type=type,
        title=title,
        body=body,
        author=author,
        valid_from=valid_from,
        verified=bool(verified_by),
        verified_by=verified_by,
        verified_at=verified_at.astimezone(UTC) if verified_at else None,
        confidence=confidence,
        source_events=tuple(sorted(set(source_events))),
    )


def check_verifier(by: str) -> str:
    """`by` if it names an owner's act (`OWNER`, `token:<name>`, `APPROVAL`), else `NoteError`:
    what keeps a run's name (`run:42`) or anything else out of `verified_by`."""
    if _is_verifier(by):
        return by
    raise NoteError(f"{by!r} is not an act of the owner that verifies a note.")


def _is_verifier(by: str) -> bool:
    kind, colon, name = by.partition(":")
    return by in (OWNER, APPROVAL) or (kind == "token" and bool(colon) and bool(name.strip()))


def parse(text: str, *, path: str = "") -> Note:
    """The note a file holds, or `NoteError` saying where it is malformed."""
    where = path or "note"
    if not text.startswith("---\n"):
        raise NoteError(f"{where}: no header.")
    header, separator, body = text[4:].partition("\n---\n")
    if not separator:
        raise NoteError(f"{where}: the header is not closed.")
    values: dict[str, object] = {}
    for line in header.splitlines():
        name, colon, raw = line.partition(": ")
        if not colon or name not in FIELDS or name in values:
            raise NoteError(f"{where}: unexpected header line {line[:80]!r}.")
        try:
            values[name] = json.loads(raw)
        except json.JSONDecodeError:
            raise NoteError(f"{where}: {name} is not a JSON value.") from None
    missing = [name for name in FIELDS if name not in values and name not in OPTIONAL]
    if missing:
        raise NoteError(f"{where}: missing {', '.join(missing)}.")
    try:
        invalid_at = values["invalid_at"]
        verified_at = values.get("verified_at")
        by = str(values.get("verified_by") or "")
        if values["verified"] is True and "verified_by" not in values and values["author"] == OWNER:
            by = OWNER  # written before acts were recorded: the owner's note, the owner's word
        # Verified means an owner's act says so: a header claiming it without one (a note
        # verified by citation before, or one edited by hand) reads as unverified.
        verified = values["verified"] is True and bool(by) and _is_verifier(by)
        return Note(
            id=str(values["id"]),
            type=str(values["type"]),
            title=str(values["title"]),
            body=body.rstrip("\n"),
            author=str(values["author"]),
            valid_from=datetime.fromisoformat(str(values["valid_from"])),
            invalid_at=datetime.fromisoformat(str(invalid_at)) if invalid_at else None,
            verified=verified,
            verified_by=by if verified else "",
            verified_at=datetime.fromisoformat(str(verified_at)) if verified_at else None,
            confidence=float(values["confidence"]),  # type: ignore[arg-type]
            source_events=tuple(int(e) for e in values["source_events"]),  # type: ignore[attr-defined]
        )
    except (TypeError, ValueError) as error:
        raise NoteError(f"{where}: {error}") from None


def check_scope(scope: str) -> str:
    if not SCOPE.fullmatch(scope):
        raise NoteError(
            f"{scope!r} is not a memory scope: one to four '/'-separated parts of a-z, 0-9, _ and -"
            " (global, project/12, agent/executor, skills)."
        )
    return scope


def slug(text: str, length: int = 48) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return words[:length].rstrip("-") or "note"


def index_text(scope: str, notes: list[Note], total: int) -> str:
    """`MEMORY.md`: one line per note, at most `INDEX_LINES` lines in all — the newest valid
    notes, verified first; the last line says how many more the search reaches."""
    lines = [f"# Memory: {scope}"]
    room = INDEX_LINES - 2
    for note in notes[:room]:
        mark = "" if note.verified else " (unverified)"
        lines.append(
            f"- [{note.title}]({note.path}) — {note.type}, {note.valid_from:%Y-%m-%d}, by"
            f" {note.author}{mark}"
        )
    if total > len(lines) - 1:
        lines.append(f"- … and {total - (len(lines) - 1)} more: search them with memory_search.")
    return "\n".join(lines) + "\n"
