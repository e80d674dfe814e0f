"""Sandbox levels chosen by policy: a tool whose level no node offers, or that a run at level 0
(a research mission) may not use, is refused by the harness with an error the model reads, and
never runs; a mission's risk class sets its runs' level."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.models import Node
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
GUI_VM_ONLY = _tool("gui_vm_only", 3)
registry.TOOLS.add(GUI_VM_ONLY.name, GUI_VM_ONLY)
CONFINED = _tool("confined", 1)
registry.TOOLS.add(CONFINED.name, CONFINED)


def run_calling(tool: str, **spec: Any) -> Run:
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
            **spec,
        },
    )
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]
    return run


def tool_result(run: Run) -> dict[str, Any]:
    result = Step.objects.get(run=run, kind="tool_call").result
    assert isinstance(result, dict)
    return result


def test_it_refuses_a_tool_that_needs_a_level_no_node_offers() -> None:
    RAN.clear()

    result = tool_result(run_calling("gui_vm_only"))

    assert result["is_error"] is True
    assert result["output"].startswith(
        "Refused: gui_vm_only needs sandbox level 3 (a GUI virtual machine): no node can run a"
        " level-3 step now (local: offers level "
    )
    assert RAN == []


def test_it_refuses_a_sandboxed_tool_when_no_node_can_run_it() -> None:
    RAN.clear()
    Node.objects.update_or_create(name="local", defaults={"enabled": False})

    result = tool_result(run_calling("confined"))

    assert result == {
        "output": "Refused: confined needs sandbox level 1 (bubblewrap sandbox): no node can"
        " run a level-1 step now (no nodes). Use another tool, or tell the owner.",
        "is_error": True,
    }
    assert RAN == []


def test_it_runs_a_sandboxed_tool_where_the_level_is_offered() -> None:
    RAN.clear()

    result = tool_result(run_calling("confined"))

    assert result["is_error"] is False
    assert len(RAN) == 1


READER = _tool("plain_reader", 0)
registry.TOOLS.add(READER.name, READER)
WRITER = Tool(
    name="plain_writer",
    description="Writes the workspace.",
    input_schema={"type": "object"},
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    run=_confined,
)
registry.TOOLS.add(WRITER.name, WRITER)


@pytest.mark.parametrize(
    ("tool", "why"),
    [("confined", " needs a sandbox."), ("plain_writer", " does not only read.")],
)
def test_a_run_at_level_0_refuses_what_does_not_only_read(tool: str, why: str) -> None:
    RAN.clear()

    result = tool_result(run_calling(tool, sandbox_level=0))

    assert result == {
        "output": f"Refused: this mission runs at sandbox level 0 (read-only research, no shell)"
        f" and {tool}{why} Use a read-only tool, or tell the owner.",
        "is_error": True,
    }
    assert RAN == []


def test_a_run_at_level_0_uses_tools_that_only_read() -> None:
    RAN.clear()

    result = tool_result(run_calling("plain_reader", sandbox_level=0))

    assert result["is_error"] is False
    assert len(RAN) == 1


def test_every_risk_class_a_mission_can_have_has_a_sandbox_level() -> None:
    from missions.models import RiskClass
    from tools import levels

    assert sorted(RiskClass.values) == sorted(levels.RISK_CLASSES)
    assert levels.DEFAULT_RISK_CLASS == RiskClass.CODE
