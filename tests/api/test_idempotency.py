"""Idempotency-Key on every write of /api/v1: replayed, never applied twice."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from agentos.core import idempotency
from agentos.core.idempotency import IdempotencyKey
from agentos.core.models import ApiToken, AuditEvent
from approvals.models import Approval
from kernel.models import Run
from missions.models import Mission, OwnerMessage, Project
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.api.factories import end_run, make_mission, make_project
from tests.approvals.factories import make_approval
from tests.factories import Owner, verified_client


@pytest.fixture
def with_key(monkeypatch: pytest.MonkeyPatch, seeded_catalog: None) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


def new_mission(api: Api, key: str, goal: str = "Write the notes.") -> Any:
    return api.post("/missions", {"project_id": make_project().pk, "goal": goal}, key=key)


def test_it_replays_a_write_without_running_it_again(api: Api, with_key: None) -> None:
    first = new_mission(api, "mission-1")
    again = new_mission(api, "mission-1")

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Mission.objects.count() == Run.objects.count() == 1
    record = IdempotencyKey.objects.get()
    assert (record.key, record.method, record.path, record.status) == (
        "mission-1",
        "POST",
        "/api/v1/missions",
        201,
    )


def test_the_same_json_in_another_layout_is_the_same_request(api: Api) -> None:
    _mission, run = make_mission()

    first = api.post(f"/runs/{run.pk}/messages", '{"text": "hi", "interrupt": false}', key="k")
    again = api.post(f"/runs/{run.pk}/messages", '{"interrupt":false,"text":"hi"}', key="k")

    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert OwnerMessage.objects.count() == 1


def test_it_replays_a_refusal_as_it_was_answered(api: Api) -> None:
    _mission, run = make_mission()
    end_run(run)

    first = api.post(f"/runs/{run.pk}/pause", key="pause-1")
    again = api.post(f"/runs/{run.pk}/pause", key="pause-1")

    assert (first.status_code, again.status_code) == (409, 409)
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize("other", ["body", "path", "method"])
def test_it_refuses_a_key_reused_for_another_request(api: Api, other: str) -> None:
    _mission, run = make_mission()
    _other_mission, other_run = make_mission("Another")
    api.post(f"/runs/{run.pk}/messages", {"text": "Use the 1.3 tag."}, key="k")

    if other == "body":
        response = api.post(f"/runs/{run.pk}/messages", {"text": "Use 1.4."}, key="k")
    elif other == "path":
        response = api.post(f"/runs/{other_run.pk}/messages", {"text": "Use the 1.3 tag."}, key="k")
    else:
        response = api.put(f"/runs/{run.pk}/messages", {"text": "Use the 1.3 tag."}, key="k")

    if other == "method":  # no such operation: refused before any view, by the router
        assert response.status_code == 405
    else:
        assert response.status_code == 422
        error = error_of(response)
        assert error["code"] == "idempotency_key_reused"
        assert error["details"] == {"method": "POST", "path": f"/api/v1/runs/{run.pk}/messages"}
    assert list(OwnerMessage.objects.values_list("text", flat=True)) == ["Use the 1.3 tag."]


@pytest.mark.parametrize("key", ["", "k" * 256, "tab\there"])
def test_it_refuses_a_malformed_key_and_changes_nothing(api: Api, key: str) -> None:
    response = api.post("/projects", {"name": "notes"}, key=key)

    assert (response.status_code, error_of(response)["code"]) == (400, "invalid_idempotency_key")
    assert not Project.objects.exists()
    assert api.post("/projects", {"name": "notes"}, key="k" * 255).status_code == 201


def test_answers_refused_before_the_view_are_not_recorded(
    api: Api, client: Client, with_key: None
) -> None:
    project = make_project()

    unauthenticated = client.post(
        "/api/v1/missions",
        {"project_id": project.pk, "goal": "x"},
        content_type="application/json",
        headers={"Idempotency-Key": "k"},
    )
    invalid = api.post("/missions", {"project_id": project.pk}, key="k")
    valid = api.post("/missions", {"project_id": project.pk, "goal": "x"}, key="k")

    assert (unauthenticated.status_code, invalid.status_code, valid.status_code) == (401, 422, 201)
    assert "Idempotent-Replayed" not in valid
    assert IdempotencyKey.objects.get().status == 201


def test_a_server_error_is_rolled_back_and_the_key_left_free(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernel import runs

    _mission, run = make_mission()
    real_pause = runs.pause_run

    def pause_then_fail(run_id: int, *, by: str) -> Run:
        real_pause(run_id, by=by)
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(runs, "pause_run", pause_then_fail)
    failed = api.post(f"/runs/{run.pk}/pause", key="pause-1")
    assert failed.status_code == 500
    assert not Run.objects.get(pk=run.pk).paused  # the pause went with the failed request
    assert not IdempotencyKey.objects.exists()

    monkeypatch.setattr(runs, "pause_run", real_pause)
    retried = api.post(f"/runs/{run.pk}/pause", key="pause-1")
    assert (retried.status_code, retried.json()["paused"]) == (200, True)
    assert "Idempotent-Replayed" not in retried


def test_a_key_is_kept_for_a_day(api: Api) -> None:
    _mission, run = make_mission()
    api.post(f"/runs/{run.pk}/messages", {"text": "first"}, key="k")

    with time_machine.travel(timezone.now() + timedelta(hours=23)):
        reused = api.post(f"/runs/{run.pk}/messages", {"text": "second"}, key="k")
    with time_machine.travel(timezone.now() + timedelta(hours=25)):
        fresh = api.post(f"/runs/{run.pk}/messages", {"text": "second"}, key="k")

    assert reused.status_code == 422
    assert fresh.status_code == 201
    assert OwnerMessage.objects.count() == 2
    assert IdempotencyKey.objects.get().path == f"/api/v1/runs/{run.pk}/messages"


def test_prune_forgets_keys_older_than_a_day(api: Api) -> None:
    _mission, run = make_mission()
    api.post(f"/runs/{run.pk}/pause", key="old")
    with time_machine.travel(timezone.now() + timedelta(hours=20)):
        api.post(f"/runs/{run.pk}/resume", key="recent")

    with time_machine.travel(timezone.now() + timedelta(hours=24, minutes=1)):
        assert idempotency.prune() == 1

    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["recent"]


def test_the_hourly_task_prunes(api: Api) -> None:
    from agentos import tasks

    _mission, run = make_mission()
    api.post(f"/runs/{run.pk}/pause", key="old")

    with time_machine.travel(timezone.now() + timedelta(days=2)):
        tasks.prune_idempotency_keys.call_local()

    assert not IdempotencyKey.objects.exists()


def test_keys_are_the_owners_own(api: Api, owner: Owner) -> None:
    _mission, run = make_mission()
    stranger = User.objects.create_user("someone-else")
    IdempotencyKey.objects.create(
        owner=stranger,
        key="k",
        method="POST",
        path="/api/v1/projects",
        fingerprint="0" * 64,
        status=201,
        body=b"{}",
    )

    response = api.post(f"/runs/{run.pk}/pause", key="k")

    assert (response.status_code, response.json()["paused"]) == (200, True)
    assert IdempotencyKey.objects.filter(key="k").count() == 2


def test_reads_and_keyless_writes_record_nothing(api: Api) -> None:
    _mission, run = make_mission()

    api.client.get(f"/api/v1/runs/{run.pk}", headers=api.headers("k"))
    api.post(f"/runs/{run.pk}/pause")

    assert not IdempotencyKey.objects.exists()


def test_approval_decisions_are_idempotent_too(approver: Api) -> None:
    approval = make_approval()
    body = {"approve": True, "args_hash": approval.request["args_hash"]}

    first = approver.post(f"/approvals/{approval.pk}/decision", body, key="decide-1")
    again = approver.post(f"/approvals/{approval.pk}/decision", body, key="decide-1")
    unkeyed = approver.post(f"/approvals/{approval.pk}/decision", body)

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert (unkeyed.status_code, error_of(unkeyed)["code"]) == (409, "already_settled")
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_a_decision_refused_for_want_of_scope_is_not_recorded(api: Api, approver: Api) -> None:
    approval = make_approval()
    body = {"approve": True, "args_hash": approval.request["args_hash"]}

    refused = api.post(f"/approvals/{approval.pk}/decision", body, key="decide-1")
    decided = approver.post(f"/approvals/{approval.pk}/decision", body, key="decide-1")

    assert (refused.status_code, error_of(refused)["code"]) == (403, "insufficient_scope")
    refusal = AuditEvent.objects.get(kind=AuditEvent.Kind.TOKEN_REFUSED)
    assert (refusal.detail["reason"], refusal.detail["scope"]) == ("missing_scope", "approve")
    assert decided.status_code == 200
    assert "Idempotent-Replayed" not in decided
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_a_new_token_is_never_replayed(owner: Owner) -> None:
    client = verified_client(owner)

    def create() -> Any:
        return client.post(
            "/api/v1/tokens",
            {"name": "phone"},
            content_type="application/json",
            headers={"Idempotency-Key": "token-1"},
        )

    first, again = create(), create()

    assert first.status_code == 201
    secret = first.json()["token"]
    assert (again.status_code, error_of(again)["code"]) == (409, "idempotency_secret_withheld")
    assert ApiToken.objects.count() == 1
    record = IdempotencyKey.objects.get()
    assert (record.status, bytes(record.body), record.withheld) == (201, b"", True)
    assert secret.encode() not in bytes(record.body)


def test_the_schema_documents_the_header_on_writes_only(client: Client) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]

    def has_header(operation: dict[str, Any]) -> bool:
        return any(p["name"] == "Idempotency-Key" for p in operation.get("parameters", []))

    assert has_header(paths["/api/v1/missions"]["post"])
    assert has_header(paths["/api/v1/approvals/{approval_id}/decision"]["post"])
    assert has_header(paths["/api/v1/settings/budget"]["patch"])
    assert not has_header(paths["/api/v1/missions"]["get"])


@pytest.mark.django_db(transaction=True)
def test_a_request_still_running_holds_its_key(
    owner: Owner, secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from missions import steering

    _mission, run = make_mission()
    entered, release = threading.Event(), threading.Event()
    real_send = steering.send_message

    def slow_send(**kwargs: Any) -> OwnerMessage:
        entered.set()
        release.wait(10)
        return real_send(**kwargs)

    monkeypatch.setattr(steering, "send_message", slow_send)
    api = Api(Client(), secret)
    answers: list[Any] = []

    def first_request() -> None:
        try:
            answers.append(api.post(f"/runs/{run.pk}/messages", {"text": "hi"}, key="k"))
        finally:
            connection.close()

    thread = threading.Thread(target=first_request)
    thread.start()
    assert entered.wait(10)
    concurrent = Api(Client(), secret).post(f"/runs/{run.pk}/messages", {"text": "hi"}, key="k")
    release.set()
    thread.join(10)
    after = Api(Client(), secret).post(f"/runs/{run.pk}/messages", {"text": "hi"}, key="k")

    assert (concurrent.status_code, error_of(concurrent)["code"]) == (
        409,
        "idempotency_in_progress",
    )
    assert answers[0].status_code == 201
    assert after["Idempotent-Replayed"] == "true"
    assert after.json() == answers[0].json()
    assert OwnerMessage.objects.count() == 1
