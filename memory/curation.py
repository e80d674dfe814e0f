"""The owner's own changes to memory, from the console or the API: a note added (verified, the
owner's word), a note verified (the only way an agent's note becomes knowledge later runs are
given), or one invalidated with a reason. Each goes through `memory.store` like an agent's
write — scrubbed, committed to the scope's repository, indexed — and is in the security log in
the same transaction (`memory.changed`: which note, by whom; never its text).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agentos.core import audit
from agentos.core.models import AuditEvent
from memory import overview, store
from memory.errors import MemoryRefused, conflict
from memory.models import Note
from memory.notes import TYPES, NoteError
from memory.store import Draft

AUTHOR = "owner"
MAX_REASON = 500


def add_note(
    *,
    scope: str,
    title: str,
    body: str,
    type: str,
    valid_from: datetime | None = None,
    actor: audit.Actor,
) -> Note:
    """A verified note of the owner in an existing scope (or one that always exists); the note
    as indexed. The same note written twice is one note."""
    name = overview.scope_name(scope)
    if name not in overview.ALWAYS:
        overview.current(name)  # 404 for an unknown scope: the owner adds, never invents one
    if type not in TYPES:
        raise MemoryRefused(f"Unknown note type {type!r}; expected one of {', '.join(TYPES)}.")
    if valid_from is not None and valid_from.tzinfo is None:
        raise MemoryRefused("valid_from needs a time zone (e.g. 2026-03-01T00:00:00Z).")
    # The owner's word: verified by this very act, and as sure as a note gets.
    draft = Draft(
        title,
        body,
        type=type,
        valid_from=valid_from,
        verified_by=actor.by,
        verified_at=timezone.now(),
        confidence=1.0,
    )
    with transaction.atomic():
        try:
            (path,) = store.write(name, [draft], author=AUTHOR, message=f"Owner: {title}")
        except NoteError as error:
            raise MemoryRefused(str(error)) from None
        _changed(actor, name, path, "added")
    return Note.objects.select_related("scope").get(scope__name=name, path=path)


def verify_note(*, scope: str, path: str, actor: audit.Actor) -> Note:
    """The owner's act on one note: it is verified from now, `verified_by` naming who (the
    owner, or the owner's token by its name), in the scope's history and the security log. 409
    if it is already verified or no longer holds."""
    found = overview.note(scope, path)
    if found.verified:
        raise conflict(f"{path} is already verified ({found.verified_by or 'owner'}).")
    if found.invalid_at is not None:
        raise conflict(f"{path} no longer holds: only a note that holds is verified.")
    with transaction.atomic():
        try:
            store.verify(found.scope.name, path, by=actor.by)
        except NoteError as error:
            # Checked above: what is left is a change since (verified or invalidated meanwhile).
            raise conflict(str(error)) from None
        _changed(actor, found.scope.name, path, "verified")
    return Note.objects.select_related("scope").get(scope=found.scope, path=path)


def invalidate_note(*, scope: str, path: str, reason: str, actor: audit.Actor) -> Note:
    """The note marked as no longer holding from now, with the owner's reason in its commit;
    the note as indexed. 409 if it is already invalid."""
    found = overview.note(scope, path)
    reason = " ".join(reason.split())
    if not reason:
        raise MemoryRefused("Say why this note no longer holds.")
    if len(reason) > MAX_REASON:
        raise MemoryRefused(f"A reason is at most {MAX_REASON} characters.")
    if found.invalid_at is not None:
        raise conflict(f"{path} is already invalid since {found.invalid_at.isoformat()}.")
    with transaction.atomic():
        try:
            store.invalidate(found.scope.name, path, author=AUTHOR, reason=reason)
        except NoteError as error:
            # Checked above: what is left is a change since (invalidated meanwhile, or a note
            # that only begins later than now).
            raise conflict(str(error)) from None
        _changed(actor, found.scope.name, path, "invalidated")
    return Note.objects.select_related("scope").get(scope=found.scope, path=path)


def _changed(actor: audit.Actor, scope: str, path: str, change: str) -> None:
    # The note's path, not the request's: `record_by` keeps a detail the caller gave.
    audit.record_by(
        AuditEvent.Kind.MEMORY_CHANGED, actor, scope=scope, path=path, change=change, by=actor.by
    )
