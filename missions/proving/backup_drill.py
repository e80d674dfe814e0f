"""The backup drill's install (docs/operations.md): finished missions' runs with their journals,
memory notes with their index rows, artifacts, filled through the real services or bulk inserts
of the same rows. Proving code: only `manage.py backup_drill` imports it."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from kernel import artifacts
from kernel.journal import request_hash
from kernel.models import Run, Step
from memory import store
from missions.models import Mission, Project

PROJECT = "backup-drill"
STEPS_PER_RUN = 12
NOTES_PER_COMMIT = 1000


def populate(*, runs: int, notes: int) -> dict[str, int]:
    """`runs` finished runs (with their steps and one artifact each) and `notes` notes over ten
    scopes; idempotent by project name (a second call adds nothing)."""
    if Project.objects.filter(name=PROJECT).exists():
        return {"runs": 0, "notes": 0}
    with transaction.atomic():
        project = Project.objects.create(name=PROJECT)
        mission = Mission.objects.create(project=project, goal="The backup drill's history.")
        _runs(mission, runs)
    _notes(notes)
    return {"runs": runs, "notes": notes}


def _runs(mission: Mission, count: int) -> None:
    now = timezone.now()
    made = Run.objects.bulk_create(
        Run(
            account=mission,
            program="mission",
            input={"goal": mission.goal, "number": n},
            status="done",
            output={"answer": f"Run {n} finished: " + "a plain answer. " * 20},
            started_at=now - timedelta(minutes=n + 5),
            finished_at=now - timedelta(minutes=n),
        )
        for n in range(count)
    )
    steps = []
    for run in made:
        for seq in range(1, STEPS_PER_RUN + 1):
            kind, name = ("model_call", "turn") if seq % 2 else ("tool_call", "read_file")
            request = {"turn": seq, "path": f"src/module_{seq}.py", "run": run.pk}
            steps.append(
                Step(
                    run=run,
                    seq=seq,
                    kind=kind,
                    effect=kind if kind == "model_call" else "read",
                    name=name,
                    request=request,
                    request_hash=request_hash(kind, name, request),
                    started_at=now,
                    finished_at=now,
                    result={"output": f"step {seq} of run {run.pk}: " + "output text " * 40},
                    executions=1,
                )
            )
    Step.objects.bulk_create(steps, batch_size=2000)
    for run in made:
        artifacts.store(content=f"report of run {run.pk}\n".encode() * 100, run=run, name="r.txt")


def _notes(count: int) -> None:
    scopes = [f"project/{n}" for n in range(1, 11)]
    per_scope = -(-count // len(scopes))
    written = 0
    for scope in scopes:
        for start in range(0, per_scope, NOTES_PER_COMMIT):
            size = min(NOTES_PER_COMMIT, per_scope - start, count - written)
            if size <= 0:
                return
            drafts = [
                store.Draft(
                    f"Fact {start + n} of {scope}",
                    f"The drill's fact number {start + n} in {scope}: " + "details. " * 30,
                )
                for n in range(size)
            ]
            store.write(scope, drafts, author="owner", message="drill")
            written += size
