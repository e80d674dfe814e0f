"""Missions and runs for the console's pages, made through the real services and executed by a
real worker on the offline scripted model."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from kernel import runs
from kernel.models import Run
from kernel.worker import Worker
from missions import pricing
from missions.launch import create_mission
from missions.models import Mission, ModelPrice, Project

SCRIPTED = {"executor": {"provider": "scripted", "model": "scripted"}}


def project(name: str = "console tests") -> Project:
    found, _ = Project.objects.get_or_create(name=name)
    return found


def launch(
    turns: list[dict[str, Any]],
    *,
    goal: str = "Write the 1.3 release notes",
    definition_of_done: str = "NOTES.md lists every change since 1.2.",
    caps: dict[str, Any] | None = None,
) -> tuple[Mission, Run]:
    """A mission started from the console's path (no tools: its project has no repository)."""
    return create_mission(
        project=project(),
        goal=goal,
        definition_of_done=definition_of_done,
        caps=caps,
        routes=SCRIPTED,
        trigger="console",
        script={"turns": turns},
    )


def start_agent(mission: Mission, turns: list[dict[str, Any]], *, tools: list[str]) -> Run:
    """Another root run of the agent loop on `mission`, with owner tools (ask, approve)."""
    return runs.start_run(
        account=mission,
        program="agent",
        model="scripted",
        input={
            "goal": mission.goal,
            "provider": "scripted",
            "model": "scripted",
            "tools": tools,
            "context_window": 100_000,
            "script": {"turns": turns},
        },
    )


def asking(question: str = "Which branch should the notes go to?") -> dict[str, Any]:
    return {
        "text": "I need to know where to publish.",
        "tool_calls": [{"name": "ask_owner", "arguments": {"question": question}}],
    }


def work() -> list[str]:
    """Execute every runnable run until none is left; the statuses they left the worker with."""
    return Worker(lease_seconds=30).run_until_idle()


def price_scripted(*, input_per_mtok: int = 3_000_000, output_per_mtok: int = 15_000_000) -> None:
    """Give the scripted model a price (from now on), so that its steps cost money."""
    ModelPrice.objects.create(
        version="console tests",
        valid_from=timezone.now() - timedelta(minutes=5),
        provider="scripted",
        model="scripted",
        input_per_mtok=input_per_mtok,
        output_per_mtok=output_per_mtok,
        cache_read_per_mtok=input_per_mtok // 10,
        cache_write_per_mtok=input_per_mtok * 5 // 4,
    )
    pricing._price_in_force.cache_clear()  # a price read this minute is cached
