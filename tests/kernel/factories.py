from __future__ import annotations

from typing import Any

from kernel import runs
from kernel.models import Run
from missions.models import Mission, Project


def make_mission(**caps: Any) -> Mission:
    project, _ = Project.objects.get_or_create(name="kernel tests")
    return Mission.objects.create(project=project, goal="exercise the kernel", **caps)


def start(program: str, input: Any = None, *, mission: Mission | None = None, **kwargs: Any) -> Run:
    return runs.start_run(
        mission=mission or make_mission(), program=program, input=input or {}, **kwargs
    )
