"""A tool below its minimum sandbox level is refused by the harness, with an error the model
reads; the tool never runs."""

from __future__ import annotations

from typing import Any

import pytest

from kernel import runs
from kernel.models import Effect, Run, Step
from kernel.worker import Worker
from tests.kernel.factories import make_mission
from tools import registry
from tools.base import Risk, Tool, ToolEnv

pytestmark = pytest.mark.django_db(transaction=True)
RAN: list[str] = []


def _confined(env: ToolEnv, arguments: dict[str, Any]) -> str:
    RAN.append(env.call.request["call_id"])
    return "ran"


def _tool(name: str, level: int) -> Tool:
    return Tool(
        name=name,
        description="Needs isolation.",
        input_schema={"type": "object"},
        effect=Effect.READ,
        risk=Risk.READ,
        run=_confined,
        min_sandbox_level=level,
    )


# Registered once per process: the registry refuses a second tool under the same name.
VM_ONLY = registry.register(_tool("vm_only", 2))
CONFINED = registry.register(_tool("confined", 1))


def run_calling(tool: str) -> Run:
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Use the tool.",
            "provider": "scripted",
            "model": "scripted",
            "tools": [tool],
            "script": {
                "turns": [
                    {"text": "Trying.", "tool_calls": [{"name": tool, "arguments": {}}]},
                    {"text": "Done."},
                ]
            },
        },
    )
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]
    return run


def tool_result(run: Run) -> dict[str, Any]:
    result = Step.objects.get(run=run, kind="tool_call").result
    assert isinstance(result, dict)
    return result


def test_it_refuses_a_tool_that_needs_a_level_no_node_offers_yet() -> None:
    RAN.clear()

    result = tool_result(run_calling("vm_only"))

    assert result["is_error"] is True
    assert result["output"].startswith(
        "Refused: vm_only needs sandbox level 2 and this node offers level "
    )
    assert RAN == []


def test_it_refuses_a_sandboxed_tool_on_a_node_without_a_sandbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cluster import sandbox

    RAN.clear()
    monkeypatch.setattr(sandbox, "offered_level", lambda: (0, "bubblewrap is not installed"))

    result = tool_result(run_calling("confined"))

    assert result == {
        "output": "Refused: confined needs sandbox level 1 and this node offers level 0"
        " (bubblewrap is not installed). Use another tool, or tell the owner.",
        "is_error": True,
    }
    assert RAN == []


def test_it_runs_a_sandboxed_tool_where_the_level_is_offered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cluster import sandbox

    RAN.clear()
    monkeypatch.setattr(sandbox, "offered_level", lambda: (1, "no VM"))

    result = tool_result(run_calling("confined"))

    assert result["is_error"] is False
    assert len(RAN) == 1
