"""`a2a_call`: a scripted agent calls an outside A2A agent (the A2A SDK's own server pieces, on
127.0.0.1) with the SDK's client, through the run's egress socket (the real egress service):
the run's allow-list decides, each request is journaled, and the answer reaches the model as
data."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from approvals.models import Approval
from kernel import exposure, runs
from kernel.models import Event, Run, RunStatus, Step
from kernel.worker import Worker
from missions import a2a_call
from missions.providers import scripted
from missions.proving import a2a_agent
from tests.cluster.egress_fixtures import egress_dir, service  # noqa: F401  # egress service
from tests.kernel.factories import make_mission
from tests.live import free_port
from tools.base import ToolError
from tools.models import PermissionRule
from tools.registry import TOOLS

pytestmark = pytest.mark.django_db(transaction=True)
EGRESS = pytest.mark.usefixtures("service")  # the egress service, running in a thread


@pytest.fixture(scope="module")
def agent() -> Iterator[a2a_agent.Agent]:
    with a2a_agent.serving(free_port()) as running:
        yield running


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[a2a_agent.Agent]:
    """Another agent, on no run's allow-list."""
    with a2a_agent.serving(free_port()) as running:
        yield running


def calling(url: str, text: str, *, hosts: list[str]) -> Run:
    """A scripted agent, allowed `hosts`, that calls `url` once, then echoes what it was given."""
    # The owner lets agents call other agents (the tool asks by default: it is network).
    PermissionRule.objects.create(
        tool=a2a_call.NAME, pattern="http://127.0.0.1:*", decision="allow"
    )
    return runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Ask the forecaster about Paris, then answer.",
            "provider": "scripted",
            "model": "scripted",
            "tools": [a2a_call.NAME],
            "data_framing": True,
            "allowed_hosts": hosts,
            "script": {
                "turns": [
                    {
                        "text": "Asking.",
                        "tool_calls": [
                            {"name": a2a_call.NAME, "arguments": {"url": url, "text": text}}
                        ],
                    },
                    {"echo_context": True},
                ]
            },
        },
    )


def host(agent: a2a_agent.Agent) -> str:
    return agent.url.removeprefix("http://")


def tool_result(run: Run) -> str:
    """The a2a_call result as the model read it at its last call (its echo of its context)."""
    last = Step.objects.filter(run=run, kind="model_call").order_by("-seq").first()
    assert last is not None
    assert isinstance(last.result, dict)
    seen: dict[str, Any] = json.loads(str(last.result["text"]).removeprefix(scripted.LABEL))
    (result,) = [item for item in seen["items"] if item.get("role") == "tool"]
    return str(result["output"])


def test_it_is_registered_as_a_network_call_whose_answer_is_the_web_s() -> None:
    tool = TOOLS[a2a_call.NAME]
    assert tool.effect == "non_idempotent"
    assert tool.risk == "network"
    assert tool.trust == "web"
    assert tool.exposes == {"outward", "untrusted"}


@EGRESS
def test_an_agent_calls_another_through_egress_and_reads_its_answer_as_data(
    agent: a2a_agent.Agent,
) -> None:
    run = calling(agent.url, "Paris", hosts=[host(agent)])

    assert Worker(lease_seconds=30).run_until_idle() == ["done"]

    run.refresh_from_db()
    assert run.status == RunStatus.DONE, run.error
    assert agent.executor.asked[-1] == "Paris"
    kinds = list(
        Event.objects.filter(run=run, kind__startswith="egress.").values_list("kind", flat=True)
    )
    # The card, the message: each through the run's egress, each journaled.
    assert kinds.count("egress.allowed") >= 2
    assert "egress.refused" not in kinds
    seen = tool_result(run)
    assert "Forecast for 'Paris': sunny." in seen
    assert "State: completed" in seen
    # The other agent's words come inside a data block of the Web's, never as instructions.
    assert seen.startswith("<data-")
    assert 'source="tool a2a_call" trust="web">' in seen
    assert a2a_agent.HOSTILE in seen
    assert set(run.exposure) == {"outward", "untrusted"}


@EGRESS
def test_a_host_not_allowed_is_refused_and_never_reached(
    agent: a2a_agent.Agent, elsewhere: a2a_agent.Agent
) -> None:
    asked_before = list(elsewhere.executor.asked)
    # Another host is allowed: not this one.
    run = calling(f"{elsewhere.url}/.well-known/agent-card.json", "Rome", hosts=[host(agent)])

    assert Worker(lease_seconds=30).run_until_idle() == ["done"]

    assert elsewhere.executor.asked == asked_before
    kinds = list(
        Event.objects.filter(run=run, kind__startswith="egress.").values_list("kind", flat=True)
    )
    assert kinds == ["egress.refused"]
    seen = tool_result(run)
    assert "Refused (HTTP 403" in seen
    assert "not on the run's allow-list" in seen


@pytest.mark.parametrize(
    ("url", "why"),
    [("ftp://127.0.0.1/agent", "not an http(s) URL"), ("http:///nohost", "not an http(s) URL")],
)
def test_a_url_that_is_no_agent_s_is_refused_before_any_request(url: str, why: str) -> None:
    with pytest.raises(ToolError, match=re.escape(why)):
        a2a_call.split(url)


def test_a_run_holding_private_data_asks_the_owner_before_it_calls_out(
    agent: a2a_agent.Agent,
) -> None:
    asked_before = list(agent.executor.asked)
    run = calling(agent.url, "Oslo", hosts=[host(agent)])
    exposure.mark(run.pk, {exposure.PRIVATE}, seq=0, by="a bridge with credentials")

    Worker(lease_seconds=30).run_until_idle()

    # The call would set the third flag: it waits for the owner, allow rule or not.
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    (approval,) = Approval.objects.filter(run=run)
    assert approval.request["tool"] == a2a_call.NAME
    assert agent.executor.asked == asked_before
