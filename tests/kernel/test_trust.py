"""Each step's result event carries the trust of whoever produced it: the owner's answers
`owner`, model text `agent`, tool output `tool`, the kernel's bookkeeping `system`."""

from __future__ import annotations

import pytest

from kernel import journal, runs, scheduler, stream
from kernel.budgets import NO_COST
from kernel.models import Effect, Event, StepKind, Trust, Wait, WaitKind
from kernel.worker import Worker
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db(transaction=True)


def completed(run_id: int) -> dict[tuple[str, str], str]:
    stream.sequence()  # step events are derived from the step rows when sequenced (0018)
    return {
        (event.data["kind"], event.data["name"]): event.trust
        for event in Event.objects.filter(run_id=run_id, kind="step.completed")
    }


def test_it_gives_each_step_result_the_trust_of_its_author() -> None:
    run = start("chaos.workflow", {"n": 1, "read_seconds": 0, "timer_seconds": 0})
    Worker(lease_seconds=30).run_until_idle()  # up to the owner's question
    wait = Wait.objects.get(run=run, kind=WaitKind.HUMAN)
    runs.answer_wait(wait.pk, answer={"approve": True}, by="owner")
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    assert run.status == "done", run.error

    assert completed(run.pk) == {
        ("model_call", "fake-model"): Trust.AGENT,
        ("tool_call", "slow-read"): Trust.TOOL,
        ("tool_call", "ledger.put"): Trust.TOOL,
        ("tool_call", "ledger.send"): Trust.TOOL,
        ("tool_call", "ledger.pay"): Trust.TOOL,
        ("timer", "timer"): Trust.SYSTEM,
        ("spawn", "chaos.child"): Trust.SYSTEM,
        ("join", "join"): Trust.SYSTEM,
        ("wait_human", "owner"): Trust.OWNER,
        ("checkpoint", "checkpoint"): Trust.SYSTEM,
        ("compaction", "fake-model"): Trust.AGENT,
        ("verdict", "verdict"): Trust.SYSTEM,
    }


def test_it_marks_a_tool_step_settled_by_the_owner_as_the_owners() -> None:
    # An interrupted non-idempotent tool step whose result the owner gave (their verdict) and
    # one whose probe found it: the first is the owner's word, the second the tool's.
    run = start("chaos.noop")
    claim = scheduler.claim_next_run(worker="test", lease_seconds=30)
    assert claim is not None
    for seq, settled_by in ((1, "owner"), (2, "probe")):
        journal.record_intent(
            claim.fence,
            seq=seq,
            kind=StepKind.TOOL_CALL,
            effect=Effect.NON_IDEMPOTENT,
            name=f"send-{seq}",
            request={},
        )
        journal.record_result(
            claim.fence, seq=seq, result={"sent": True}, cost=NO_COST, settled_by=settled_by
        )

    assert completed(run.pk) == {
        ("tool_call", "send-1"): Trust.OWNER,
        ("tool_call", "send-2"): Trust.TOOL,
    }
