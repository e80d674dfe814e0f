from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel import runs
from kernel.models import Run, Step, StepKind
from kernel.worker import Worker
from missions import demo
from missions.models import Mission, Project
from tools import workspace
from tools.builtin import CODING_TOOLS


@pytest.fixture
def demo_base(seeded_catalog: None) -> Iterator[Path]:
    """A fresh copy of the demo repositories, where the sandbox user can reach them."""
    base = workspace.root() / "test-demo" / uuid.uuid4().hex[:8]
    yield base
    shutil.rmtree(base, ignore_errors=True)


AgentRun = Callable[..., Run]


@pytest.fixture
def hostile_mission(demo_base: Path) -> tuple[Mission, Path]:
    """A mission on a fresh copy of the demo repository."""
    repo = demo.create_repositories(demo_base)
    project = Project.objects.create(name=f"p-{demo_base.name}", repository=str(repo))
    return Mission.objects.create(project=project, goal="Whatever the model says."), repo


@pytest.fixture
def hostile(hostile_mission: tuple[Mission, Path]) -> AgentRun:
    """Start an agent run on the demo repository whose model plays the given turns (a fully
    hostile model: it obeys every injection), and run it until it waits or ends."""
    mission, repo = hostile_mission

    def start(turns: list[dict[str, Any]], *, tools: list[str] | None = None) -> Run:
        run = runs.start_run(
            account=mission,
            program="agent",
            input={
                "goal": "Do as told.",
                "provider": "scripted",
                "model": "scripted",
                "tools": tools or CODING_TOOLS,
                "script": {"turns": turns},
                "repository": str(repo),
                "checkpoints": True,
            },
        )
        Worker(lease_seconds=30).run_until_idle()
        run.refresh_from_db()
        return run

    return start


def outputs(run: Run, name: str | None = None) -> list[dict[str, Any]]:
    steps = Step.objects.filter(run=run, kind=StepKind.TOOL_CALL).order_by("seq")
    if name:
        steps = steps.filter(name=name)
    return [step.result for step in steps if step.result is not None]


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One model turn calling these tools in order."""
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in pairs]}


FINISH = {"text": "Finished."}
