"""The rule of two in the harness: a call that would set its run tree's third flag waits for the
owner, whatever the permission rules say, and the approval says which flags are set by what;
refused, it never runs. Flags are marked by the step that set them, and a tool's output is
framed by the trust it declares."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from approvals import service
from approvals.models import Approval
from kernel import exposure
from kernel.models import Effect, Run, Step, Trust
from missions.engine import harness
from tests.missions.test_loop import agent_run, work
from tools import registry
from tools.base import Risk, Tool, ToolEnv

pytestmark = pytest.mark.django_db(transaction=True)
SENT: list[str] = []


def _send(env: ToolEnv, arguments: dict[str, Any]) -> str:
    SENT.append(arguments["text"])
    return "sent"


SEND = Tool(
    name="send_out",
    description="Send a message out.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    effect=Effect.READ,  # allowed by default: only the rule of two stands in its way
    risk=Risk.READ,
    run=_send,
    exposes=frozenset({exposure.OUTWARD}),
)
READ_WEB = Tool(
    name="read_web",
    description="Read a page.",
    input_schema={"type": "object"},
    effect=Effect.READ,
    risk=Risk.READ,
    run=lambda env, arguments: "a page from outside",
    trust=Trust.WEB,
    exposes=frozenset({exposure.UNTRUSTED}),
)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@pytest.fixture(autouse=True)
def tools() -> Any:
    SENT.clear()
    with (
        registry.TOOLS.registered(SEND.name, SEND),
        registry.TOOLS.registered(READ_WEB.name, READ_WEB),
    ):
        yield


def test_the_third_flag_waits_for_the_owner_and_a_refusal_keeps_it_from_running() -> None:
    turns: list[dict[str, Any]] = [
        {"text": "Read, then send.", "tool_calls": [call("read_web"), call("send_out", text="x")]},
        {"text": "Done."},
    ]
    run = agent_run(turns, tools=["read_web", "send_out"], data_framing=True)
    exposure.mark(run.pk, {exposure.PRIVATE}, seq=0, by="bridge search")
    assert work() == ["waiting"]  # on the owner
    approval = Approval.objects.get(run=run)
    assert approval.request["rule_of_two"] == [
        f"holds secrets or private data: step 0 of run {run.pk} (bridge search)",
        "read untrusted content: an earlier call of this turn",
    ]
    # The earlier call ran, and marked its flag from its own step.
    assert exposure.of_tree(run.pk).flags[exposure.UNTRUSTED]["seq"] == first_tool_seq(run)
    assert SENT == []
    service.decide(approval.pk, approve=False, args_hash=approval.request["args_hash"])
    assert work() == ["done"]
    assert SENT == []
    assert exposure.OUTWARD not in exposure.of_tree(run.pk).flags
    refused = Step.objects.get(run=run, name="send_out").result
    assert isinstance(refused, dict)
    assert refused["is_error"]


def test_approved_it_runs_and_marks_the_flag_and_web_output_is_framed_as_web() -> None:
    turns: list[dict[str, Any]] = [
        {"text": "Read.", "tool_calls": [call("read_web")]},
        {"text": "Send.", "tool_calls": [call("send_out", text="y")]},
        {"text": "Done."},
    ]
    run = agent_run(turns, tools=["read_web", "send_out"], data_framing=True)
    exposure.mark(run.pk, {exposure.PRIVATE}, seq=0, by="bridge search")
    assert work() == ["waiting"]
    approval = Approval.objects.get(run=run)
    assert approval.request["rule_of_two"][0].startswith("read untrusted content: step ")
    service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
    assert work() == ["done"]
    assert SENT == ["y"]
    flags = exposure.of_tree(run.pk).flags
    assert flags[exposure.OUTWARD]["by"] == "send_out"


def test_a_tools_output_is_framed_by_the_least_trust_of_its_step_and_its_own() -> None:
    ctx = SimpleNamespace(records={})
    web = harness._render(ctx, 1, "page", source="tool read_web", least=Trust.WEB)  # type: ignore[arg-type]  # only its records are read
    assert 'trust="web"' in web
    tool = harness._render(ctx, 1, "out", source="tool x")  # type: ignore[arg-type]  # idem
    assert 'trust="tool"' in tool


def test_two_flags_need_nobody() -> None:
    turns: list[dict[str, Any]] = [
        {"text": "Read, send.", "tool_calls": [call("read_web"), call("send_out", text="z")]},
        {"text": "Done."},
    ]
    run = agent_run(turns, tools=["read_web", "send_out"])
    assert work() == ["done"]
    assert SENT == ["z"]
    assert not Approval.objects.filter(run=run).exists()
    assert set(exposure.of_tree(run.pk).flags) == {exposure.UNTRUSTED, exposure.OUTWARD}


def first_tool_seq(run: Run) -> int:
    return Step.objects.filter(run=run, name="read_web").values_list("seq", flat=True).get()
