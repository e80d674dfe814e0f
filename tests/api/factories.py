"""Projects, missions, runs and steps for the API tests, made through the real services (steps
are written as the journal records them: the kernel's own tests cover how they get there)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from kernel import artifacts, journal
from kernel.models import Artifact, Run, Step
from missions.launch import create_mission
from missions.models import Mission, Project

SCRIPT = {"turns": [{"text": "Done."}]}
SCRIPTED = {"executor": {"provider": "scripted", "model": "scripted"}}


def make_project(name: str = "api tests") -> Project:
    project, _ = Project.objects.get_or_create(name=name)
    return project


def make_mission(goal: str = "Write the release notes.", **kwargs: Any) -> tuple[Mission, Run]:
    """A mission whose root run plays `SCRIPT` on the offline model (no provider key needed)."""
    return create_mission(
        project=kwargs.pop("project", None) or make_project(),
        goal=goal,
        routes=SCRIPTED,
        trigger="test",
        script=SCRIPT,
        **kwargs,
    )


def add_steps(run: Run, count: int, *, unfinished: int = 0) -> list[Step]:
    """`count` model steps with results and costs, then `unfinished` intents without results."""
    now = timezone.now()
    steps = []
    for seq in range(1, count + unfinished + 1):
        done = seq <= count
        request = {"messages": [{"role": "user", "content": f"turn {seq}"}]}
        steps.append(
            Step.objects.create(
                run=run,
                seq=seq,
                kind="model_call",
                effect="model_call",
                name="scripted",
                request=request,
                request_hash=journal.request_hash("model_call", "scripted", request),
                idempotency_key=journal.idempotency_key(run.pk, seq),
                started_at=now + timedelta(seconds=seq),
                result={"text": f"answer {seq}"} if done else None,
                finished_at=now + timedelta(seconds=seq, milliseconds=500) if done else None,
                settled_by="executed" if done else "",
                executions=1,
                input_tokens=100 * seq if done else 0,
                output_tokens=10 * seq if done else 0,
                usd_micros=1000 * seq if done else 0,
            )
        )
    return steps


def end_run(run: Run, status: str = "done") -> Run:
    Run.objects.filter(pk=run.pk).update(status=status, finished_at=timezone.now())
    run.refresh_from_db()
    return run


def make_artifact(run: Run, content: bytes = b"# Notes\n", **kwargs: Any) -> Artifact:
    return artifacts.store(content=content, run=run, **kwargs)
