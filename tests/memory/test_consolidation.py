"""Consolidation on a scripted scenario: duplicates and superseded notes invalidated, a lesson
kept only when its run ended done, a forged citation refused, and no note verified — not even one
citing the owner's event (only the owner's act on a note verifies it) — header changes only, one
commit citing the events, and a second pass changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kernel import journal, runs
from kernel.models import Run, RunStatus, Trust
from memory import consolidation, notes, repository, store
from memory.models import Note
from memory.store import Draft
from missions.models import Mission, Project

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)
FEB = datetime(2026, 2, 10, 9, 0, tzinfo=UTC)
MAR = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SCOPE = "project/7"


def ended_run(mission: Mission, status: str) -> Run:
    run = runs.start_run(account=mission, program="agent", input={"goal": "x"})
    Run.objects.filter(pk=run.pk).update(status=status)
    return run


def test_a_pass_dedupes_supersedes_and_drops_never_verifies_then_a_second_changes_nothing() -> None:
    mission = Mission.objects.create(project=Project.objects.create(name="p"), goal="g")
    done = ended_run(mission, RunStatus.DONE)
    failed = ended_run(mission, RunStatus.FAILED)
    said = journal.append_event("owner.message", run_id=done.pk, trust=Trust.OWNER, text="db-2")
    seen = journal.append_event("tool.output", run_id=done.pk, trust=Trust.TOOL)
    other = journal.append_event("tool.output", run_id=failed.pk, trust=Trust.TOOL)

    def by(run: Run, *drafts: Draft) -> list[str]:
        return store.write(SCOPE, list(drafts), author=f"run:{run.pk}", message="learned")

    first, again = by(
        done,
        Draft("Deploys need the VPN", "Connect first.", valid_from=JAN, source_events=(seen.pk,)),
        Draft("deploys need the  VPN", "Connect  first.", valid_from=FEB),  # the same, later
    )
    db_jan, db_mar = by(
        done,
        Draft("Staging DB host", "db-1.internal", valid_from=JAN),
        Draft("Staging DB host", "db-2.internal", valid_from=MAR, source_events=(said.pk,)),
    )
    (kept_lesson,) = by(done, Draft("Run tests before pushing", "It saved us.", type="lesson"))
    (lost_lesson,) = by(failed, Draft("Skip the linter", "Faster.", type="lesson"))
    (forged,) = by(done, Draft("Prod password rotated", "Trust me.", source_events=(other.pk,)))
    (tool_only,) = by(done, Draft("Build takes 4 minutes", "Measured.", source_events=(seen.pk,)))

    report = consolidation.consolidate(SCOPE, why="test")

    assert report.duplicates == [again]
    assert report.superseded == [db_jan]
    assert report.lessons_dropped == [lost_lesson]
    assert report.forged == [forged]
    rows = {row.path: row for row in Note.objects.filter(scope__name=SCOPE)}
    assert rows[db_jan].invalid_at == MAR  # ends where the newer one begins
    assert rows[again].invalid_at == FEB
    assert rows[first].invalid_at is None
    assert rows[kept_lesson].invalid_at is None
    assert rows[lost_lesson].invalid_at is not None
    # Citing the owner's words is no act of the owner's on the note: it stays unverified.
    assert not rows[db_mar].verified
    assert not rows[tool_only].verified
    assert not Note.objects.filter(scope__name=SCOPE, verified=True).exists()
    ((_sha, _date, subject),) = repository.log(SCOPE)[:1]
    assert subject == "Consolidate (test): 4 change(s)"
    assert f"Source-Events: {said.pk}" in _message(SCOPE)
    assert f"- {db_jan}: superseded by {db_mar}" in _message(SCOPE)
    text = store.read_file(SCOPE, db_jan)
    assert notes.parse(text).body == "db-1.internal"  # the text is kept

    tip = repository.head(SCOPE)
    assert consolidation.consolidate(SCOPE, why="again").changed == 0
    assert repository.head(SCOPE) == tip


def test_a_lesson_of_a_run_still_going_waits_for_its_outcome() -> None:
    mission = Mission.objects.create(project=Project.objects.create(name="p"), goal="g")
    going = runs.start_run(account=mission, program="agent", input={"goal": "x"})
    (lesson,) = store.write(SCOPE, [Draft("Cache the wheels", "Halves CI.", type="lesson")],
                            author=f"run:{going.pk}", message="lesson")  # fmt: skip

    assert consolidation.consolidate(SCOPE, why="test").changed == 0
    assert Note.objects.get(path=lesson).invalid_at is None


def _message(scope: str) -> str:
    return repository._git(  # the full message, which log() summarises
        repository.path_of(scope), "log", "-n1", "--format=%B", repository.BRANCH
    ).stdout.decode()
