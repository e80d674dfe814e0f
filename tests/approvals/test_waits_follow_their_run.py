"""A stopped run's approvals and questions end with it: nothing waits for the owner on a run that
will not go on, and deciding one of them says so plainly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from approvals import inbox, service
from approvals.errors import ApprovalError
from approvals.models import Approval, Question, Status
from kernel import journal, runs
from kernel.models import Run, RunStatus, Wait, WaitKind, WaitState
from tests.approvals.factories import (
    approval_request,
    make_approval,
    make_mission,
    make_question,
    question_request,
)

pytestmark = pytest.mark.django_db


def test_it_ends_the_open_waits_of_a_cancelled_run() -> None:
    approval = make_approval()
    question = Wait.objects.create(
        run=approval.run,
        seq=2,
        kind=WaitKind.HUMAN,
        question=question_request(approval.run.account.mission),
    )

    runs.request_stop(approval.run_id, reason=RunStatus.CANCELLED)

    closed = Approval.objects.get(pk=approval.pk)
    assert closed.state != WaitState.OPEN
    assert closed.status == Status.CLOSED
    assert closed.settled_at is not None
    assert Question.objects.get(pk=question.pk).status == Status.CLOSED
    assert inbox.waiting().items == []
    assert {item.pk for item in inbox.settled().items} == {approval.pk, question.pk}


def test_it_ends_the_waits_of_the_runs_below_too() -> None:
    mission = make_mission()
    parent = runs.start_run(account=mission, program="test.approvals.asks", input={})
    child = runs.start_run(account=mission, program="test.approvals.asks", input={}, parent=parent)
    wait = Wait.objects.create(
        run=child, seq=1, kind=WaitKind.HUMAN, question=approval_request(mission)
    )

    runs.request_stop(parent.pk)

    assert Approval.objects.get(pk=wait.pk).status == Status.CLOSED


def test_it_leaves_settled_waits_and_other_runs_alone() -> None:
    other = make_approval(arguments={"command": "make other"})
    approval = make_approval()
    service.decide(approval.pk, approve=False, args_hash=approval.request["args_hash"])

    runs.request_stop(approval.run_id)

    assert Approval.objects.get(pk=approval.pk).status == Status.REFUSED
    assert Approval.objects.get(pk=other.pk).status == Status.PENDING


def test_it_ends_the_waits_in_the_same_transaction_as_the_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    approval = make_approval()

    def dies(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the process died here")

    monkeypatch.setattr(journal, "append_event", dies)
    with pytest.raises(RuntimeError):
        runs.request_stop(approval.run_id)

    assert Approval.objects.get(pk=approval.pk).status == Status.PENDING
    assert Run.objects.get(pk=approval.run_id).cancel_requested is False


def test_deciding_a_closed_approval_says_the_run_was_stopped() -> None:
    approval = make_approval()
    runs.request_stop(approval.run_id)

    with pytest.raises(ApprovalError) as refused:
        service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])

    assert refused.value.code == "closed"
    assert refused.value.status == 409
    assert Approval.objects.get(pk=approval.pk).status == Status.CLOSED


def test_answering_a_closed_question_says_the_run_was_stopped() -> None:
    question = make_question()
    runs.request_stop(question.run_id)

    with pytest.raises(ApprovalError) as refused:
        service.answer(question.pk, text="main")

    assert refused.value.code == "closed"


def test_a_wait_left_open_on_an_ended_run_is_not_waiting_and_cannot_be_decided() -> None:
    # Stopped before waits ended with their run: the row is still open, its run is over.
    approval = make_approval()
    Run.objects.filter(pk=approval.run_id).update(status=RunStatus.CANCELLED)

    assert Approval.objects.get(pk=approval.pk).status == Status.CLOSED
    assert inbox.waiting().items == []
    with pytest.raises(ApprovalError) as refused:
        service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
    assert refused.value.code == "closed"


def test_the_page_of_a_closed_approval_shows_it_closed_without_buttons(
    owner_client: Client,
) -> None:
    approval = make_approval()
    runs.request_stop(approval.run_id)

    content = owner_client.get(f"/approvals/{approval.pk}/").content.decode()

    assert 'id="approval-status">closed: the run was stopped<' in content
    assert "the run goes on" not in content
    assert 'value="approve"' not in content


def test_approving_a_closed_approval_says_so_plainly(owner_client: Client) -> None:
    approval = make_approval()
    runs.request_stop(approval.run_id)

    response = owner_client.post(
        f"/approvals/{approval.pk}/",
        {"args_hash": approval.request["args_hash"], "decision": "approve"},
    )

    assert response.status_code == 409
    content = response.content.decode()
    assert f"Run {approval.run_id} was stopped" in content
    assert "nothing was approved" in content
    assert 'id="approval-status">closed: the run was stopped<' in content
    assert "the run goes on" not in content


def test_answering_a_closed_question_on_its_page_says_so(owner_client: Client) -> None:
    question = make_question(due_in=timedelta(days=1))
    runs.request_stop(question.run_id)

    response = owner_client.post(f"/questions/{question.pk}/", {"text": "main"})

    assert response.status_code == 409
    content = response.content.decode()
    assert f"Run {question.run_id} was stopped" in content
    assert 'id="question-status">closed: the run was stopped<' in content
    assert "Expired" not in content
