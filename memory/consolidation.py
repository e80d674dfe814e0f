"""Consolidation: a scope's recent notes checked against each other and against the journal, at
the end of a run, after a compaction, and nightly — deterministic rules, header changes only,
one commit citing the events it relied on.

For each note written (or changed) since the scope was last consolidated:
1. **Duplicates**: a valid note saying the same (same type, title and body once case and spacing
   are set aside) as an older valid one is invalidated as its duplicate.
2. **Contradictions**: a valid note with the same subject (type and title) as an older valid one
   but another text supersedes it: the older one ends where the newer one begins.
3. **Outcome signal**: an agent's `lesson` stays only if its run ended `done`; a lesson of a run
   that failed, was cancelled or ran out of budget is invalidated (a run still going is looked at
   again next time).
4. **Citations against the journal**: an agent's note citing events that are not its run's is a
   forged citation, and the note is invalidated.

Consolidation never verifies a note: citing events proves nothing of what the owner thinks of a
note (a run's newest event may well be the owner's answer to another question, or an approval).
Only the owner's act on that note verifies it (`memory.curation.verify_note`, an approved
proposal, a note the owner wrote); `store.prompt_index` shows only those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models.functions import Lower
from django.utils import timezone

from kernel.models import TERMINAL, Event, Run, RunStatus
from memory import notes, store
from memory.models import Note, Scope

AUTHOR = "consolidator"
RECENT = 5000  # notes looked at per pass; the rest wait for the next one


@dataclass
class Report:
    scope: str
    looked_at: int = 0
    duplicates: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    lessons_dropped: list[str] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(
            len(paths)
            for paths in (
                self.duplicates,
                self.superseded,
                self.lessons_dropped,
                self.forged,
            )
        )


def consolidate(scope: str, *, why: str) -> Report:
    """One pass over `scope`'s notes written since its last pass; what it changed."""
    notes.check_scope(scope)
    report = Report(scope)
    with store.locked(scope) as row:
        started = timezone.now()
        recent = Note.objects.filter(
            scope=row, invalid_at__isnull=True, pk__gt=row.consolidated_through
        )
        fresh = sorted(recent.order_by("pk")[:RECENT], key=lambda n: (n.valid_from, n.path))
        report.looked_at = len(fresh)
        ended: dict[str, tuple[datetime, str]] = {}
        cited: set[int] = set()
        runs = _runs_of(fresh)
        events_run = _events_of(fresh)
        for note in fresh:
            if note.path in ended:
                continue
            for other in _same_subject(row, note):
                if other.path in ended or _key(other) >= _key(note):
                    continue  # only an older note is a duplicate's original or superseded
                if _text(other) == _text(note):
                    ended[note.path] = (note.valid_from, f"duplicate of {other.path}")
                    report.duplicates.append(note.path)
                    break
                # An agent's newer note never ends what the owner verified.
                if other.valid_from < note.valid_from and (note.verified or not other.verified):
                    ended[other.path] = (note.valid_from, f"superseded by {note.path}")
                    report.superseded.append(other.path)
                    cited.update(note.source_events)
            if note.path in ended:
                continue
            run_id = _run_of(note)
            if run_id is None:
                continue
            foreign = [e for e in note.source_events if events_run.get(e, run_id) != run_id]
            if foreign:
                ended[note.path] = (note.valid_from, f"cites events of other runs: {foreign[:5]}")
                report.forged.append(note.path)
                continue
            status = runs.get(run_id)
            if note.type == "lesson" and status in TERMINAL and status != RunStatus.DONE:
                ended[note.path] = (started, f"a lesson of a run that ended {status}")
                report.lessons_dropped.append(note.path)
        if ended:
            store.amend(
                row,
                ended=ended,
                summary=f"Consolidate ({why}): {report.changed} change(s)",
                author=AUTHOR,
                events=sorted(cited),
            )
        # Rows are made anew by a change (and by a reindex): what is above this was not seen.
        last = Note.objects.filter(scope=row).order_by("-pk").values_list("pk", flat=True)[:1]
        row.consolidated_through = max([row.consolidated_through, *last])
        row.save(update_fields=["consolidated_through"])
    return report


def consolidate_all(*, why: str) -> list[Report]:
    return [consolidate(name, why=why) for name in Scope.objects.values_list("name", flat=True)]


def _same_subject(row: Scope, note: Note) -> list[Note]:
    """The other valid notes of the scope on the same subject (type and title), oldest first."""
    return list(
        Note.objects.annotate(lowered=Lower("title"))
        .filter(scope=row, invalid_at__isnull=True, type=note.type, lowered=note.title.lower())
        .exclude(pk=note.pk)
        .order_by("valid_from", "path")[:50]
    )


def _key(note: Note) -> tuple[datetime, str]:
    return (note.valid_from, note.path)


def _text(note: Note) -> str:
    return re.sub(r"\s+", " ", f"{note.title}\n{note.body}").strip().casefold()


def _run_of(note: Note) -> int | None:
    kind, _, number = note.author.partition(":")
    return int(number) if kind == "run" and number.isdigit() else None


def _runs_of(fresh: list[Note]) -> dict[int, str]:
    ids = {run for note in fresh if (run := _run_of(note)) is not None}
    return dict(Run.objects.filter(pk__in=ids).values_list("pk", "status"))


def _events_of(fresh: list[Note]) -> dict[int, int | None]:
    """The run each event the notes cite belongs to."""
    ids = {event for note in fresh for event in note.source_events}
    return dict(Event.objects.filter(pk__in=ids).values_list("pk", "run_id"))
