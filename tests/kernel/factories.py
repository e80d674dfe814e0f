from __future__ import annotations

from typing import Any

from kernel import runs
from kernel.models import Account, Run
from missions.models import Mission, Project


def make_account(**caps: Any) -> Account:
    return Account.objects.create(**caps)


def make_mission(**caps: Any) -> Mission:
    project, _ = Project.objects.get_or_create(name="kernel tests")
    return Mission.objects.create(project=project, goal="exercise the kernel", **caps)


def start(program: str, input: Any = None, *, account: Account | None = None, **kwargs: Any) -> Run:
    return runs.start_run(
        account=account or make_account(), program=program, input=input or {}, **kwargs
    )
