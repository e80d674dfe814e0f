"""Stall detection through the real agent loop: the same call three times gets one re-plan
message the model sees; three more get a question to the owner, whose answer resumes the run.
A quiet ledger and a cap near stall the run the same way."""

from __future__ import annotations

import json
from typing import Any

import pytest

from approvals import service
from approvals.models import Question, Status
from kernel import runs
from kernel.models import Run, RunStatus, Step
from kernel.worker import Worker
from missions.engine import stalls
from missions.providers import scripted
from tests.kernel.factories import make_mission

pytestmark = pytest.mark.django_db(transaction=True)


def start(turns: list[dict[str, Any]], *, tools: list[str], **caps: Any) -> Run:
    return runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Find the bug.",
            "provider": "scripted",
            "model": "scripted",
            "tools": tools,
            "stalls": True,
            "script": {"turns": turns},
        },
        caps=caps,
    )


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


SAME = {"name": "noop", "arguments": {"note": "look again", "n": 1}}
# The same call with its arguments in another order: canonically the same.
SAME_REORDERED = {"name": "noop", "arguments": {"n": 1, "note": "look again"}}


def model_texts(run: Run) -> list[str]:
    results = Step.objects.filter(run=run, kind="model_call").order_by("seq")
    return [(result or {})["text"] for result in results.values_list("result", flat=True)]


def context_of(text: str) -> dict[str, Any]:
    """What the scripted model echoed: the context it was given."""
    return dict(json.loads(text.removeprefix(scripted.LABEL)))


def shown(message: str, context: str) -> bool:
    """Whether an echoed context (JSON) holds `message` once, as it was given."""
    return context.count(json.dumps(message)[1:-1]) == 1


def test_the_same_call_three_times_gets_a_replan_then_an_owner_question() -> None:
    run = start(
        [
            {"text": "Looking.", "tool_calls": [SAME]},
            {"text": "Looking.", "tool_calls": [SAME_REORDERED]},
            {"text": "Looking.", "tool_calls": [SAME]},
            # It sees the re-plan, and repeats itself anyway.
            {"echo_context": True, "tool_calls": [SAME]},
            {"text": "Looking.", "tool_calls": [SAME]},
            {"text": "Looking.", "tool_calls": [SAME]},
            {"echo_context": True},
        ],
        tools=["noop"],
    )

    assert work() == ["waiting"]

    replan = stalls.REPLAN.format(reason="you called noop with the same arguments 3 times in a row")
    fourth = model_texts(run)[3]
    assert fourth.count(replan) == 1
    assert json.dumps(replan)[1:-1] in fourth  # as a message of its own context
    decisions = Step.objects.filter(run=run, name=stalls.STEP).order_by("seq")
    assert [step.request["action"] for step in decisions] == ["replan", "escalate"]
    assert [step.request["turn"] for step in decisions] == [3, 6]

    # The owner's question, on Home.
    question = Question.objects.get(run=run)
    assert question.status == Status.PENDING
    assert question.question["mission_id"] == run.account_id
    assert "is stalled again after a re-plan" in question.question["text"]
    assert "noop with the same arguments 3 times in a row" in question.question["text"]

    service.answer(question.pk, text="Read the parser's tests instead.")
    assert work() == ["done"]

    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    last = model_texts(run)[-1]
    assert "The owner answered: Read the parser's tests instead." in last
    # One re-plan in the context the model was given, never repeated by the replay.
    users = [item["text"] for item in context_of(last)["items"] if item["role"] == "user"]
    assert sum(replan in text for text in users) == 1
    assert Step.objects.filter(run=run, name=stalls.STEP).count() == 2


def test_a_supervisor_with_a_quiet_ledger_and_a_run_near_its_cap_are_told_to_replan() -> None:
    quiet = start(
        [
            *[
                {"text": "Busy.", "tool_calls": [{"name": "noop", "arguments": {"n": n}}]}
                for n in range(stalls.QUIET_TURNS)
            ],
            {"echo_context": True},
        ],
        tools=["noop", "ledger_plan", "ledger_update", "ledger_fact", "ledger_view"],
    )
    near = start(
        [
            *[
                {"text": "Busy.", "tool_calls": [{"name": "noop", "arguments": {"n": n}}]}
                for n in range(9)
            ],
            {"echo_context": True},
        ],
        tools=["noop"],
        max_turns=10,
    )

    assert sorted(work()) == ["done", "done"]

    quiet_reason = f"the mission's ledger has not changed for {stalls.QUIET_TURNS} turns"
    assert shown(stalls.REPLAN.format(reason=quiet_reason), model_texts(quiet)[-1])
    near_reason = "90% of this run's model turns budget is spent"
    assert shown(stalls.REPLAN.format(reason=near_reason), model_texts(near)[-1])
    assert Step.objects.filter(run=near, name=stalls.STEP).get().request["turn"] == 9
