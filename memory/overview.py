"""What the owner reads of memory, for the console's Memory screen and `/api/v1/memory` alike:
the scopes, a scope's notes by pages, one note with where it came from, a scope's git history,
search, and the proposals to shared memory waiting for the owner.

Every read names its scope first (`current`): a malformed name is refused (400), an unknown one
is not found (404), and a known one has its index brought to its repository's tip before it is
read, so what is shown is what git holds. Lists are pages of the index, never a whole scope (a
scope may hold 100,000 notes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from approvals import inbox
from approvals.models import Approval
from kernel.models import Event
from memory import repository, search, store
from memory.errors import MemoryRefused, not_found
from memory.models import Note, Scope
from memory.notes import SCOPE, NoteError, check_scope

# Listed, and open to the owner's notes, before anything was written to them.
ALWAYS = ("global", "skills")
NOTE_PATH = re.compile(r"notes/\d{4}-\d{2}/[a-z0-9-]{1,120}\.md")
MAX_EVENT_ID = 2**63 - 1
PROPOSE_TOOL = "memory_propose"
# What a listed note carries: never its body (up to 20,000 characters) or vectors.
LISTED = (
    "path",
    "note_id",
    "type",
    "title",
    "author",
    "source_events",
    "verified",
    "confidence",
    "valid_from",
    "invalid_at",
)


@dataclass(frozen=True)
class ScopeSummary:
    name: str
    valid: int  # valid now
    invalidated: int  # ended: invalid_at in the past
    head: str  # the repository's tip, "" before the first commit
    changed_at: datetime | None  # the tip's commit date
    shared: bool  # the agents' writes to it wait for the owner's approval


@dataclass(frozen=True)
class Commit:
    id: str
    at: datetime
    subject: str


@dataclass(frozen=True)
class Proposal:
    approval: Approval
    scope: str
    title: str
    replaces: str
    diff: str
    created_at: datetime


def scope_name(scope: str) -> str:
    """A well-formed scope name, or a refusal saying what one is (400)."""
    try:
        return check_scope(scope)
    except NoteError as error:
        raise MemoryRefused(str(error)) from None


def current(scope: str) -> Scope:
    """The scope's index row, at its repository's tip; 404 for a scope that has neither a
    repository nor an index (and is not one that always exists)."""
    name = scope_name(scope)
    tip = repository.head(name)
    row = Scope.objects.filter(name=name).first()
    if row is None and not tip and name not in ALWAYS:
        raise not_found(f"No memory scope {name!r}.")
    if row is None or row.head != tip:
        row = store.sync(name)  # a writer killed after its commit left the index behind
    return row


def scopes() -> list[ScopeSummary]:
    """Every scope (those on disk, those indexed, and the ones that always exist), by name,
    with its counts and last change: one git call and one query per scope at most."""
    names = {*ALWAYS, *Scope.objects.values_list("name", flat=True)}
    names |= {name for name in repository.scopes() if SCOPE.fullmatch(name)}
    rows = {row.name: row for row in Scope.objects.filter(name__in=names)}
    tips: dict[str, tuple[str, datetime | None]] = {}
    for name in sorted(names):
        newest = repository.log(name, limit=1)
        tip, at = (newest[0][0], datetime.fromisoformat(newest[0][1])) if newest else ("", None)
        tips[name] = (tip, at)
        row = rows.get(name)
        if (row.head if row else "") != tip:
            rows[name] = store.sync(name)
    now = timezone.now()
    counts: dict[str, tuple[int, int]] = {
        name: (valid, invalidated)
        for name, valid, invalidated in Note.objects.filter(scope__name__in=names)
        .values("scope__name")
        .annotate(
            valid=Count("id", filter=_valid_at(now)),
            invalidated=Count("id", filter=Q(invalid_at__lte=now)),
        )
        .values_list("scope__name", "valid", "invalidated")
    }
    return [
        ScopeSummary(
            name=name,
            valid=counts.get(name, (0, 0))[0],
            invalidated=counts.get(name, (0, 0))[1],
            head=tips[name][0],
            changed_at=tips[name][1],
            shared=store.shared(name),
        )
        for name in sorted(names)
    ]


def summary(row: Scope) -> ScopeSummary:
    newest = repository.log(row.name, limit=1)
    now = timezone.now()
    counted = Note.objects.filter(scope=row).aggregate(
        valid=Count("id", filter=_valid_at(now)),
        invalidated=Count("id", filter=Q(invalid_at__lte=now)),
    )
    return ScopeSummary(
        name=row.name,
        valid=counted["valid"],
        invalidated=counted["invalidated"],
        head=row.head,
        changed_at=datetime.fromisoformat(newest[0][1]) if newest else None,
        shared=store.shared(row.name),
    )


def notes_of(row: Scope, *, ended: bool, limit: int, offset: int = 0) -> tuple[list[Note], int]:
    """A page of the scope's notes and how many there are in all: those that hold now (or will),
    newest first; or, `ended`, those invalidated, the latest invalidation first."""
    now = timezone.now()
    found: QuerySet[Note] = Note.objects.filter(scope=row).only(*LISTED)
    if ended:
        found = found.filter(invalid_at__lte=now).order_by("-invalid_at", "path")
    else:
        found = found.filter(Q(invalid_at__isnull=True) | Q(invalid_at__gt=now))
        found = found.order_by("-valid_from", "path")
    return list(found[offset : offset + limit]), found.count()


def note(scope: str, path: str) -> Note:
    """One note of a scope, by its path in the repository (notes/YYYY-MM/<id>.md)."""
    row = current(scope)
    if not NOTE_PATH.fullmatch(path):
        raise MemoryRefused(
            f"{path[:200]!r} is not a note's path: notes/YYYY-MM/<name>.md, as listed."
        )
    found = Note.objects.filter(scope=row, path=path).select_related("scope").first()
    if found is None:
        raise not_found(f"No note {path} in {row.name}.")
    return found


def history(scope: str, *, limit: int) -> list[Commit]:
    """The scope's newest commits on main (what was added, invalidated, approved, by whom)."""
    row = current(scope)
    return [
        Commit(id=commit_id, at=datetime.fromisoformat(at), subject=subject)
        for commit_id, at, subject in repository.log(row.name, limit=limit)
    ]


def find(
    query: str, *, scope: str = "", as_of: datetime | None = None, k: int = 10
) -> list[search.Hit]:
    """`memory_search` as the agents have it, over one scope or every indexed one."""
    if as_of is not None and as_of.tzinfo is None:
        raise MemoryRefused("as_of needs a time zone (e.g. 2026-03-01T00:00:00Z).")
    names = [current(scope).name] if scope else list(Scope.objects.values_list("name", flat=True))
    try:
        return search.search(query, scopes=names, as_of=as_of, k=k)
    except NoteError as error:
        raise MemoryRefused(str(error)) from None


def event_places(ids: Iterable[int]) -> dict[int, tuple[int, int | None]]:
    """Where each cited event happened: its run and step (events outside a run, or no longer
    kept, are left out)."""
    wanted = sorted({i for i in ids if 0 <= i <= MAX_EVENT_ID})
    if not wanted:
        return {}
    found = Event.objects.filter(id__in=wanted, run__isnull=False).values_list("id", "run", "seq")
    return {event: (run, seq) for event, run, seq in found if run is not None}


def proposals(*, limit: int) -> tuple[list[Proposal], int]:
    """Agents' proposals to shared memory still waiting for the owner, newest first; each is an
    approval (decided on its own page) whose preview holds the diff."""
    pending = inbox.approvals(pending_only=True).filter(question__tool=PROPOSE_TOOL)
    shown = []
    for approval in pending[:limit]:
        request = approval.request
        arguments = _dict(request.get("arguments"))
        preview = _dict(request.get("preview"))
        shown.append(
            Proposal(
                approval=approval,
                scope=str(arguments.get("scope", "")),
                title=str(arguments.get("title", "")),
                replaces=str(arguments.get("replaces", "")),
                diff=str(preview.get("diff") or ""),
                created_at=approval.created_at,
            )
        )
    return shown, pending.count()


def pending_branches() -> set[str]:
    """The proposals branches of the proposals still waiting for the owner."""
    pending = inbox.approvals(pending_only=True).filter(question__tool=PROPOSE_TOOL)
    return {str(_dict(approval.request.get("preview")).get("branch", "")) for approval in pending}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _valid_at(moment: datetime) -> Q:
    return Q(valid_from__lte=moment) & (Q(invalid_at__isnull=True) | Q(invalid_at__gt=moment))
