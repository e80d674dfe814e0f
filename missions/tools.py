"""`start_mission`: an agent starts a new mission in its own project — through the same path as
the console, the API and schedules, so it is billed, journaled and traced the same way.
Registered with the tool registry by the app (`MissionsConfig.ready`)."""

from __future__ import annotations

from typing import Any

from kernel.exceptions import KernelError
from kernel.models import Effect, Run
from missions.errors import MissionError
from missions.launch import create_mission
from missions.models import Project
from tools.base import Risk, Tool, ToolEnv, ToolError


def _trigger(env: ToolEnv) -> str:
    return f"agent:{env.call.idempotency_key}"


def _start(env: ToolEnv, arguments: dict[str, Any]) -> str:
    project = Project.objects.filter(pk=env.project_id).first() if env.project_id else None
    if project is None:
        raise ToolError("This run has no project to start a mission in.")
    try:
        mission, run = create_mission(
            project=project,
            goal=arguments["goal"],
            definition_of_done=arguments.get("definition_of_done", ""),
            trigger=_trigger(env),
        )
    # The mission's refusal or the kernel's (caps, the account's limits): the model reads why.
    except (MissionError, KernelError) as error:
        raise ToolError(f"The mission was not started: {error.message}") from None
    return f"Started mission {mission.pk} (run {run.pk})."


def _started(env: ToolEnv, arguments: dict[str, Any]) -> str | None:
    """After a crash: the mission this very step started, if it exists."""
    run = Run.objects.filter(contract__trigger=_trigger(env), parent__isnull=True).first()
    return f"Started mission {run.account_id} (run {run.pk})." if run else None


START_MISSION = Tool(
    name="start_mission",
    description=(
        "Start a new mission in this project (it runs on its own, with its own budget). The"
        " owner is asked first."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "goal": {"type": "string", "minLength": 1, "maxLength": 20000},
            "definition_of_done": {"type": "string", "maxLength": 5000},
        },
        "required": ["goal"],
        "additionalProperties": False,
    },
    effect=Effect.NON_IDEMPOTENT,
    risk=Risk.EXTERNAL,  # it spends the owner's money: ask unless a rule allows it
    run=_start,
    probe=_started,
    subject=lambda arguments: str(arguments.get("goal", "")),
)
