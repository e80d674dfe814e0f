"""Bad input the database would refuse is answered 422, never 500, and changes nothing."""

from __future__ import annotations

import pytest
from django.db import DataError

from agentos.core.models import AuditEvent
from kernel.models import Wait, WaitState
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.approvals.factories import make_approval, make_question


def test_it_refuses_nul_characters_in_answers_and_decisions(approver: Api) -> None:
    question = make_question()
    approval = make_approval()

    answered = approver.post(f"/questions/{question.pk}/answer", {"text": "main\x00"})
    decided = approver.post(
        f"/approvals/{approval.pk}/decision",
        {"approve": False, "args_hash": approval.request["args_hash"], "note": "\x00"},
    )

    for response in (answered, decided):
        assert (response.status_code, error_of(response)["code"]) == (422, "invalid_input")
    assert set(Wait.objects.values_list("state", flat=True)) == {WaitState.OPEN}


def test_a_value_the_database_refuses_is_bad_input(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from missions import projects

    def refuse(**kwargs: object) -> None:
        raise DataError("value out of range")

    monkeypatch.setattr(projects, "create_project", refuse)

    response = api.post("/projects", {"name": "notes"})

    assert response.status_code == 422
    assert error_of(response) == {
        "code": "invalid_input",
        "message": "A value cannot be stored (out of range, or a NUL character).",
        "details": None,
    }
    assert AuditEvent.objects.filter(
        kind=AuditEvent.Kind.API_BAD_INPUT, detail__reason="unstorable"
    ).exists()
