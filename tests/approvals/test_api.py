from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from agentos.core import tokens
from agentos.core.models import AuditEvent
from approvals import service
from approvals.models import Approval
from kernel.models import Event, Wait, WaitState
from tests.agentos.test_api import bearer, error_of
from tests.approvals.factories import DIFF, answer_of, make_approval, make_question
from tests.factories import Owner, verified_client
from tools.models import Decision, PermissionRule


def decide(client: Client, approval: Approval, **body: Any) -> Any:
    body.setdefault("args_hash", approval.request["args_hash"])
    return client.post(
        f"/api/v1/approvals/{approval.pk}/decision", body, content_type="application/json"
    )


def test_it_lists_pending_approvals_newest_first(owner_client: Client) -> None:
    older = make_approval(arguments={"command": "make deploy"})
    newer = make_approval(
        tool="git_push",
        arguments={"remote": "origin", "branch": "main"},
        preview={"commit": "a9c4f2e", "diff": DIFF},
    )
    decided = make_approval(arguments={"command": "make clean"})
    service.decide(decided.pk, approve=False, args_hash=decided.request["args_hash"])

    response = owner_client.get("/api/v1/approvals")

    assert response.status_code == 200
    listed = response.json()
    assert [item["id"] for item in listed] == [newer.pk, older.pk]
    assert listed[0] == {
        "id": newer.pk,
        "status": "pending",
        "tool": "git_push",
        "arguments": {"remote": "origin", "branch": "main"},
        "args_hash": newer.request["args_hash"],
        "risk": "external",
        "justification": "The tests pass; deploying publishes the notes.",
        "preview": {"commit": "a9c4f2e", "diff": DIFF},
        "project_id": newer.request["project_id"],
        "mission_id": newer.run.account_id,
        "run_id": newer.run_id,
        "created_at": listed[0]["created_at"],
        "due_at": listed[0]["due_at"],
        "decided_at": None,
        "answer": None,
    }


def test_it_lists_decided_and_expired_approvals_with_status_all(owner_client: Client) -> None:
    pending = make_approval()
    refused = make_approval(arguments={"command": "make clean"})
    service.decide(refused.pk, approve=False, args_hash=refused.request["args_hash"], note="no")
    expired = make_approval(arguments={"command": "make publish"}, due_in=timedelta(hours=-1))

    listed = owner_client.get("/api/v1/approvals", {"status": "all"}).json()

    by_id = {item["id"]: item for item in listed}
    assert [item["id"] for item in listed] == [expired.pk, refused.pk, pending.pk]
    assert by_id[pending.pk]["status"] == "pending"
    assert by_id[expired.pk]["status"] == "expired"
    assert by_id[refused.pk]["status"] == "refused"
    assert by_id[refused.pk]["decided_at"] is not None
    assert by_id[refused.pk]["answer"] == {
        "approved": False,
        "args_hash": refused.request["args_hash"],
        "always": False,
        "note": "no",
    }


def test_it_refuses_an_unknown_status_filter(owner_client: Client) -> None:
    response = owner_client.get("/api/v1/approvals", {"status": "maybe"})

    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_input"


def test_it_shows_one_approval(owner_client: Client) -> None:
    approval = make_approval()

    response = owner_client.get(f"/api/v1/approvals/{approval.pk}")

    assert response.status_code == 200
    assert response.json()["args_hash"] == approval.request["args_hash"]
    assert response.json()["status"] == "pending"


def test_it_answers_404_for_an_unknown_approval(owner_client: Client, db: None) -> None:
    question = make_question()  # a question is not an approval

    for path in ["/api/v1/approvals/999999", f"/api/v1/approvals/{question.pk}"]:
        response = owner_client.get(path)
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"

    response = owner_client.post(
        "/api/v1/approvals/999999/decision",
        {"approve": True, "args_hash": "x"},
        content_type="application/json",
    )
    assert response.status_code == 404
    assert error_of(response) == {
        "code": "not_found",
        "message": "No approval 999999.",
        "details": None,
    }


def test_it_approves_the_exact_call_and_wakes_the_run(owner_client: Client) -> None:
    approval = make_approval()

    response = decide(owner_client, approval, approve=True)

    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert response.json()["decided_at"] is not None
    wait = Wait.objects.get(pk=approval.pk)
    assert wait.state == WaitState.ANSWERED
    assert wait.answer == {
        "approved": True,
        "args_hash": approval.request["args_hash"],
        "always": False,
        "note": "",
    }
    assert wait.run.wake_pending  # queued, never executed: woken for its next claim
    assert Event.objects.filter(kind="wait.answered", run_id=approval.run_id).exists()


def test_it_keeps_each_decision_in_the_security_log_and_nothing_for_a_refused_one(
    owner_client: Client, owner: Owner
) -> None:
    approval = make_approval()
    decide(owner_client, approval, approve=True, args_hash="0" * 64)  # another call: refused
    decide(owner_client, approval, approve=True, always=True)
    decide(owner_client, approval, approve=False)  # already settled: refused

    logged = AuditEvent.objects.get(kind=AuditEvent.Kind.APPROVAL_DECIDED)

    assert logged.username == owner.username
    assert logged.address == "127.0.0.1"
    assert logged.detail == {
        "approval": approval.pk,
        "run": approval.run_id,
        "tool": "shell",
        "args_hash": approval.request["args_hash"],
        "approved": True,
        "always": True,
        "by": "owner",
    }


def test_it_refuses_with_a_note(owner_client: Client) -> None:
    approval = make_approval()

    response = decide(owner_client, approval, approve=False, note="Wait for Monday.")

    assert response.status_code == 200
    assert response.json()["status"] == "refused"
    assert response.json()["answer"]["note"] == "Wait for Monday."


def test_it_always_allows_in_the_project(owner_client: Client) -> None:
    approval = make_approval()

    response = decide(owner_client, approval, approve=True, always=True)

    assert response.status_code == 200
    rule = PermissionRule.objects.get()
    assert rule.project_id == approval.request["project_id"]
    assert (rule.tool, rule.pattern, rule.decision) == ("shell", "make deploy", Decision.ALLOW)


def test_it_refuses_always_with_a_refusal(owner_client: Client) -> None:
    approval = make_approval()

    response = decide(owner_client, approval, approve=False, always=True)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_input"
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


def test_it_refuses_a_decision_on_another_call(owner_client: Client) -> None:
    approval = make_approval()

    response = decide(owner_client, approval, approve=True, args_hash="0" * 64)

    assert response.status_code == 409
    assert error_of(response)["code"] == "hash_mismatch"
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


def test_it_refuses_to_decide_twice(owner_client: Client) -> None:
    approval = make_approval()
    decide(owner_client, approval, approve=False)

    response = decide(owner_client, approval, approve=True)

    assert response.status_code == 409
    assert error_of(response)["code"] == "already_settled"
    assert answer_of(approval.pk)["approved"] is False


def test_it_refuses_to_decide_after_expiry(owner_client: Client) -> None:
    approval = make_approval(due_in=timedelta(minutes=-1))

    response = decide(owner_client, approval, approve=True)

    assert response.status_code == 409
    assert error_of(response)["code"] == "expired"
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


@pytest.mark.parametrize(
    "body",
    [
        {"args_hash": "abc"},  # no decision
        {"approve": "yes", "args_hash": "abc"},  # not a JSON boolean
        {"approve": 1, "args_hash": "abc"},
        {"approve": True},  # no hash
        {"approve": True, "args_hash": "abc", "alwyas": True},  # a typo is not ignored
        {"approve": True, "args_hash": "abc", "note": "x" * 2001},
    ],
)
def test_it_answers_a_malformed_decision_with_422(owner_client: Client, body: object) -> None:
    approval = make_approval()

    response = owner_client.post(
        f"/api/v1/approvals/{approval.pk}/decision", body, content_type="application/json"
    )

    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_input"
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


def test_it_answers_broken_json_with_400(owner_client: Client) -> None:
    approval = make_approval()

    response = owner_client.post(
        f"/api/v1/approvals/{approval.pk}/decision", "{approve", content_type="application/json"
    )

    assert response.status_code == 400
    assert error_of(response)["code"] == "malformed_json"


def test_it_lets_a_token_with_the_approve_scope_decide_and_logs_its_name(
    client: Client, owner: Owner
) -> None:
    approval = make_approval()
    secret = tokens.create_token(
        owner=owner.user, name="phone shortcut", scopes=["read", "act", "approve"]
    ).secret

    listed = client.get("/api/v1/approvals", headers=bearer(secret))
    decided = client.post(
        f"/api/v1/approvals/{approval.pk}/decision",
        {"approve": True, "args_hash": approval.request["args_hash"]},
        content_type="application/json",
        headers=bearer(secret),
    )

    assert [item["id"] for item in listed.json()] == [approval.pk]
    assert decided.status_code == 200
    assert decided.json()["status"] == "approved"
    logged = AuditEvent.objects.get(kind=AuditEvent.Kind.APPROVAL_DECIDED)
    assert (logged.username, logged.detail["by"]) == (owner.username, "token:phone shortcut")


def test_it_refuses_a_decision_by_a_token_without_the_approve_scope(
    client: Client, owner: Owner
) -> None:
    approval = make_approval()
    secret = tokens.create_token(owner=owner.user, name="backup-script").secret  # read + act

    response = client.post(
        f"/api/v1/approvals/{approval.pk}/decision",
        {"approve": True, "args_hash": approval.request["args_hash"]},
        content_type="application/json",
        headers=bearer(secret),
    )

    assert response.status_code == 403
    assert error_of(response) == {
        "code": "insufficient_scope",
        "message": "This API token lacks the 'approve' scope (needed to decide approvals, "
        "answer questions, settle unknown outcomes, approve skills and MCP tools); create a "
        "token with it in Settings.",
        "details": None,
    }
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.APPROVAL_DECIDED).exists()


def test_it_lets_only_an_approve_token_answer_a_question_and_logs_its_name(
    client: Client, owner: Owner
) -> None:
    question = make_question()
    url = f"/api/v1/questions/{question.pk}/answer"
    plain = tokens.create_token(owner=owner.user, name="cron").secret
    approver = tokens.create_token(owner=owner.user, name="phone", scopes=["act", "approve"])

    refused = client.post(url, {"text": "main"}, "application/json", headers=bearer(plain))
    answered = client.post(
        url, {"text": "main"}, "application/json", headers=bearer(approver.secret)
    )

    assert (refused.status_code, error_of(refused)["code"]) == (403, "insufficient_scope")
    assert answered.status_code == 200
    logged = AuditEvent.objects.get(kind=AuditEvent.Kind.QUESTION_ANSWERED)
    assert logged.detail["by"] == "token:phone"


def test_it_checks_csrf_on_session_decisions(owner: Owner) -> None:
    approval = make_approval()
    client = verified_client(owner, Client(enforce_csrf_checks=True))

    response = decide(client, approval, approve=True)

    assert response.status_code == 403
    assert error_of(response)["code"] == "csrf_failed"
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


def test_it_refuses_strangers(client: Client, db: None) -> None:
    approval = make_approval()

    assert client.get("/api/v1/approvals").status_code == 401
    assert decide(client, approval, approve=True).status_code == 401
    assert Wait.objects.get(pk=approval.pk).state == WaitState.OPEN


# --- questions ----------------------------------------------------------------------------------


def test_it_lists_and_shows_questions(owner_client: Client) -> None:
    question = make_question(choices=["main", "release"])
    make_approval()  # not a question

    listed = owner_client.get("/api/v1/questions").json()
    shown = owner_client.get(f"/api/v1/questions/{question.pk}").json()

    assert [item["id"] for item in listed] == [question.pk]
    assert shown == {
        "id": question.pk,
        "status": "pending",
        "text": "Which branch should the notes go to?",
        "choices": ["main", "release"],
        "mission_id": question.run.account_id,
        "run_id": question.run_id,
        "created_at": shown["created_at"],
        "due_at": shown["due_at"],
        "answered_at": None,
        "answer": None,
    }


def test_it_answers_a_question_and_wakes_the_run(owner_client: Client) -> None:
    question = make_question()

    response = owner_client.post(
        f"/api/v1/questions/{question.pk}/answer",
        {"text": "release"},
        content_type="application/json",
    )

    assert response.status_code == 200
    assert response.json()["status"] == "answered"
    assert response.json()["answer"] == "release"
    wait = Wait.objects.get(pk=question.pk)
    assert (wait.state, wait.answer) == (WaitState.ANSWERED, {"text": "release"})
    assert wait.run.wake_pending
    listed = owner_client.get("/api/v1/questions", {"status": "all"}).json()
    assert listed[0]["status"] == "answered"
    assert owner_client.get("/api/v1/questions").json() == []


def test_it_keeps_who_answered_a_question_in_the_security_log_not_the_answer(
    owner_client: Client, owner: Owner
) -> None:
    question = make_question()
    answer = {"text": "release, and the key is hunter2"}
    url = f"/api/v1/questions/{question.pk}/answer"

    assert owner_client.post(url, answer, content_type="application/json").status_code == 200
    assert owner_client.post(url, answer, content_type="application/json").status_code == 409

    logged = AuditEvent.objects.get(kind=AuditEvent.Kind.QUESTION_ANSWERED)  # once
    assert (logged.username, logged.address) == (owner.username, "127.0.0.1")
    assert logged.detail == {"question": question.pk, "run": question.run_id, "by": "owner"}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"text": "   "}, 400, "invalid_input"),
        ({}, 422, "invalid_input"),
        ({"text": 3}, 422, "invalid_input"),
    ],
)
def test_it_refuses_a_bad_answer(
    owner_client: Client, body: object, status: int, code: str
) -> None:
    question = make_question()

    response = owner_client.post(
        f"/api/v1/questions/{question.pk}/answer", body, content_type="application/json"
    )

    assert response.status_code == status
    assert error_of(response)["code"] == code
    assert Wait.objects.get(pk=question.pk).state == WaitState.OPEN


def test_it_refuses_to_answer_twice_late_or_elsewhere(owner_client: Client) -> None:
    answered = make_question()
    service.answer(answered.pk, text="main")
    late = make_question(due_in=timedelta(seconds=-1))
    approval = make_approval()

    def post(pk: int) -> Any:
        return owner_client.post(
            f"/api/v1/questions/{pk}/answer",
            json.dumps({"text": "release"}),
            content_type="application/json",
        )

    assert (post(answered.pk).status_code, error_of(post(answered.pk))["code"]) == (
        409,
        "already_settled",
    )
    assert (post(late.pk).status_code, error_of(post(late.pk))["code"]) == (409, "expired")
    assert (post(approval.pk).status_code, error_of(post(approval.pk))["code"]) == (
        404,
        "not_found",
    )
    assert (post(999999).status_code, owner_client.get("/api/v1/questions/999999").status_code) == (
        404,
        404,
    )


def test_it_documents_the_routes(client: Client) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]

    assert {
        "/api/v1/approvals",
        "/api/v1/approvals/{approval_id}",
        "/api/v1/approvals/{approval_id}/decision",
        "/api/v1/questions",
        "/api/v1/questions/{question_id}",
        "/api/v1/questions/{question_id}/answer",
    } <= set(paths)
