"""Unknown outcomes: a worker killed between a non-repeatable call's effect and its result
leaves a question only the owner can answer, in the queue, on Home and over the API; each of
the three answers ends the run as it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from agentos.core import tokens
from agentos.core.models import AuditEvent
from approvals.models import Reconciliation
from kernel import runs
from kernel.models import ChaosEffect, Run, RunStatus, Step, Wait, WaitKind, WaitState
from kernel.worker import Worker
from tests.agentos.test_api import bearer, error_of
from tests.factories import Owner
from tests.kernel.factories import start
from tests.live import crash_env
from tests.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PAY = 5  # chaos.workflow's non-idempotent step without a probe ("ledger.pay")


def killed_mid_payment(tmp_path: Path) -> Run:
    """A real worker process SIGKILLed after the payment took effect, before its result was
    recorded; then resumed here, where the run stops to ask the owner."""
    run = start("chaos.workflow", {"n": 1, "timer_seconds": 0})
    env = crash_env(tmp_path, [{"run": run.pk, "point": "after_effect_before_result", "seq": PAY}])
    worker = subprocess.Popen(
        [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "proving_worker",
            *("--lease", "30", "--poll", "0.2"),
        ],
        env=env,
    )
    try:
        assert worker.wait(timeout=60) == -9
    finally:
        if worker.poll() is None:
            worker.kill()
    assert payments(run) == 1
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)  # its lease ran out
    assert work() == ["waiting"]
    return run


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


def payments(run: Run) -> int:
    return ChaosEffect.objects.filter(run_id_value=run.pk, seq=PAY).count()


def finish(run: Run) -> Run:
    """Drive the rest of the workflow: its timer, its child, and its own owner question."""

    def ended() -> Run | None:
        if (found := Run.objects.get(pk=run.pk)).is_terminal:
            return found
        for wait in Wait.objects.filter(run=run, kind=WaitKind.HUMAN, state=WaitState.OPEN):
            runs.answer_wait(wait.pk, answer={"ok": True})
        work()
        return None

    return wait_for(ended, timeout=60, message="the run to end")


def the_question(run: Run) -> Reconciliation:
    return Reconciliation.objects.get(run=run, seq=PAY)


def approver(owner: Owner) -> dict[str, str]:
    scopes = ["read", "act", "approve"]
    return bearer(tokens.create_token(owner=owner.user, name="phone", scopes=scopes).secret)


def verdict_over_api(client: Client, owner: Owner, wait: Reconciliation, **body: Any) -> Any:
    return client.post(
        f"/api/v1/reconciliations/{wait.pk}/verdict",
        body,
        content_type="application/json",
        headers={**approver(owner), "Idempotency-Key": f"verdict-{wait.pk}"},
    )


def test_it_lists_the_unknown_outcome_with_the_exact_call_in_the_api_queue_and_home(
    tmp_path: Path, owner: Owner, owner_client: Client
) -> None:
    run = killed_mid_payment(tmp_path)
    wait = the_question(run)

    listed = owner_client.get("/api/v1/reconciliations").json()

    assert listed == [
        {
            "type": "reconciliation",
            "id": wait.pk,
            "status": "pending",
            "mission_id": run.account_id,
            "run_id": run.pk,
            "seq": PAY,
            "call": {"tool": "ledger.pay", "arguments": {"value": 3}},
            "effect": "non_idempotent",
            "started_at": listed[0]["started_at"],
            "probe": None,
            "verdict": None,
            "result": None,
            "created_at": listed[0]["created_at"],
            "answered_at": None,
        }
    ]
    url = reverse("console:reconciliation", args=[wait.pk])
    for page in ("/", "/approvals/"):
        html = owner_client.get(page).content.decode()
        assert url in html, page
        assert "ledger.pay" in html
    page = owner_client.get(url).content.decode()
    assert "&quot;value&quot;: 3" in page  # the exact call
    assert "has no check of its own" in page  # what the probe said: there is none
    for answer in ("happened", "not_happened", "stop"):
        assert f'value="{answer}"' in page


def test_it_records_the_step_as_done_with_the_owners_result_from_the_api(
    tmp_path: Path, owner: Owner, client: Client
) -> None:
    run = killed_mid_payment(tmp_path)
    wait = the_question(run)

    response = verdict_over_api(client, owner, wait, verdict="happened", result="paid, receipt 42")
    replayed = verdict_over_api(client, owner, wait, verdict="happened", result="paid, receipt 42")

    assert response.status_code == 200, response.content
    assert replayed.json() == response.json()  # the same Idempotency-Key: the first answer
    assert response.json()["verdict"] == "happened"
    assert response.json()["result"] == "paid, receipt 42"
    ended = finish(run)
    assert ended.status == RunStatus.DONE
    step = Step.objects.get(run=run, seq=PAY)
    assert step.result == {"output": "paid, receipt 42", "is_error": False}
    assert (step.settled_by, step.executions) == ("owner", 0)
    assert isinstance(ended.output, dict)
    assert ended.output["pay"] == {"output": "paid, receipt 42", "is_error": False}
    assert payments(run) == 1  # never paid twice
    logged = AuditEvent.objects.get(kind=AuditEvent.Kind.RECONCILIATION_SETTLED)
    assert logged.detail == {
        "by": "token:phone",
        "reconciliation": wait.pk,
        "run": run.pk,
        "step": PAY,
        "verdict": "happened",
    }


def test_it_runs_the_step_again_once_when_the_owner_says_it_did_not_happen_in_the_console(
    tmp_path: Path, owner_client: Client
) -> None:
    run = killed_mid_payment(tmp_path)
    wait = the_question(run)
    url = reverse("console:reconciliation", args=[wait.pk])

    response = owner_client.post(url, {"verdict": "not_happened"})

    assert response.status_code == 302
    assert "the step runs again, once" in owner_client.get(url).content.decode()
    ended = finish(run)
    assert ended.status == RunStatus.DONE
    assert payments(run) == 2  # the killed attempt's, and one more
    assert Step.objects.get(run=run, seq=PAY).settled_by == "executed"
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.RECONCILIATION_SETTLED).count() == 1


def test_it_records_the_owners_result_from_the_console(
    tmp_path: Path, owner_client: Client
) -> None:
    run = killed_mid_payment(tmp_path)
    wait = the_question(run)

    owner_client.post(
        reverse("console:reconciliation", args=[wait.pk]),
        {"verdict": "happened", "result": "it went through"},
    )

    ended = finish(run)
    assert ended.status == RunStatus.DONE
    assert isinstance(ended.output, dict)
    assert ended.output["pay"] == {"output": "it went through", "is_error": False}
    assert payments(run) == 1


def test_it_stops_the_run_from_the_console(tmp_path: Path, owner_client: Client) -> None:
    run = killed_mid_payment(tmp_path)
    wait = the_question(run)

    owner_client.post(reverse("console:reconciliation", args=[wait.pk]), {"verdict": "stop"})

    ended = finish(run)
    assert ended.status == RunStatus.CANCELLED
    assert payments(run) == 1
    assert Step.objects.get(run=run, seq=PAY).finished_at is None
    assert owner_client.get("/api/v1/reconciliations").json() == []  # nothing waits any more


def test_it_stops_the_run_from_the_api(tmp_path: Path, owner: Owner, client: Client) -> None:
    run = killed_mid_payment(tmp_path)

    response = verdict_over_api(client, owner, the_question(run), verdict="stop")

    assert response.status_code == 200
    assert finish(run).status == RunStatus.CANCELLED
    assert payments(run) == 1


def test_it_runs_the_step_again_from_the_api(tmp_path: Path, owner: Owner, client: Client) -> None:
    run = killed_mid_payment(tmp_path)

    response = verdict_over_api(client, owner, the_question(run), verdict="not_happened")

    assert response.status_code == 200
    assert finish(run).status == RunStatus.DONE
    assert payments(run) == 2


def test_it_needs_the_approve_scope_and_one_verdict(owner: Owner, client: Client) -> None:
    run = start("chaos.workflow", {"n": 1})
    wait = Wait.objects.create(run=run, seq=PAY, kind=WaitKind.RECONCILE, question={})
    reader = tokens.create_token(owner=owner.user, name="script", scopes=["read", "act"])
    path = f"/api/v1/reconciliations/{wait.pk}/verdict"

    refused = client.post(
        path, {"verdict": "stop"}, content_type="application/json", headers=bearer(reader.secret)
    )
    wrong = client.post(
        path,
        {"verdict": "not_happened", "result": "x"},
        content_type="application/json",
        headers=approver(owner),
    )
    first = client.post(
        path, {"verdict": "not_happened"}, content_type="application/json", headers=approver(owner)
    )
    again = client.post(
        path, {"verdict": "stop"}, content_type="application/json", headers=approver(owner)
    )

    assert (refused.status_code, error_of(refused)["code"]) == (403, "insufficient_scope")
    assert (wrong.status_code, error_of(wrong)["code"]) == (400, "invalid_input")
    assert first.status_code == 200
    assert (again.status_code, error_of(again)["code"]) == (409, "already_settled")
    assert not Run.objects.get(pk=run.pk).cancel_requested
