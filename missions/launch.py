"""Starting a mission's root run: the one path every trigger takes (console, API, schedule,
another agent), so billing, journal and telemetry are the same whoever pulled it."""

from __future__ import annotations

from typing import Any

from kernel import runs
from kernel.exceptions import KernelError
from kernel.models import Run
from missions.models import Mission
from missions.routing import route_for
from tools.builtin import CODING_TOOLS

CODING_INSTRUCTIONS = """\
You work in a git worktree of the project, mounted at /workspace in the sandbox where the shell
tool runs commands (no network there). Read before you edit; run the tests with the shell tool;
commit your work with git_commit; git_push asks the owner to approve the exact commit."""


def start_mission(
    mission: Mission,
    *,
    trigger: str = "owner",
    script: dict[str, Any] | None = None,
    max_turns: int = 50,
) -> Run:
    """Start the mission's executor run on its route (the scripted model when the route's
    provider has no key: then `script` is what it plays)."""
    route = route_for(mission, "executor")
    if route.provider == "scripted" and script is None:
        raise KernelError(
            "No API key for the executor's provider and no script for the offline model: set"
            " ANTHROPIC_API_KEY or OPENAI_API_KEY.",
            code="no_provider",
        )
    constraints = []
    if mission.definition_of_done.strip():
        constraints.append(f"Definition of done: {mission.definition_of_done.strip()}")
    repository = mission.project.repository
    spec: dict[str, Any] = {
        "goal": mission.goal,
        "provider": route.provider,
        "model": route.model,
        "effort": route.effort,
        "tools": CODING_TOOLS if repository else [],
        "constraints": constraints,
        "instructions": CODING_INSTRUCTIONS if repository else "",
        "repository": repository,
        "max_turns": max_turns,
    }
    if route.provider == "scripted":
        spec["script"] = script
    return runs.start_run(
        mission=mission,
        program="agent",
        input=spec,
        model=route.model,
        contract={"trigger": trigger, "scripted_stand_in": route.scripted_stand_in},
    )
