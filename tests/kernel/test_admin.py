from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client
from django.urls import reverse

from kernel.models import (
    ChaosEffect,
    DailySpend,
    Event,
    GlobalBudget,
    ProviderSpend,
    Run,
    RunStatus,
    Step,
    Wait,
    WorkerBeat,
)
from missions.models import Mission, Project

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def make_run() -> Run:
    project = Project.objects.create(name="admin tests")
    mission = Mission.objects.create(project=project, goal="show the kernel in the admin")
    return Run.objects.create(account=mission, program="test", max_turns=10)


def change_form(run: Run, **fields: object) -> dict[str, object]:
    """What the browser posts: the caps, the read-only steps inline's management form."""
    steps = run.steps.count()
    return {
        "max_tokens": "",
        "max_usd_micros": "",
        "max_turns": run.max_turns or "",
        "max_tool_calls": "",
        "max_seconds": "",
        "steps-TOTAL_FORMS": steps,
        "steps-INITIAL_FORMS": steps,
        "steps-MIN_NUM_FORMS": 0,
        "steps-MAX_NUM_FORMS": 0,
        **fields,
    }


# The chaos drills' records are left out of the admin (tests/console/test_rough_edges.py).
@pytest.mark.parametrize("model", ["run", "step", "wait", "event", "artifact", "workerbeat"])
def test_it_lists_each_kernel_record(owner_client: Client, model: str) -> None:
    run = make_run()
    Step.objects.create(
        run=run, seq=1, kind="tool_call", effect="read", request_hash="h", idempotency_key="k",
        started_at=NOW,
    )  # fmt: skip
    Wait.objects.create(run=run, seq=1, kind="timer", due_at=NOW)
    Event.objects.create(at=NOW, run=run, kind="step.started")
    ChaosEffect.objects.create(key="k", run_id_value=run.pk, seq=1, effect="read")
    WorkerBeat.objects.create(worker="host:1", started_at=NOW, beat_at=NOW)

    response = owner_client.get(reverse(f"admin:kernel_{model}_changelist"))

    assert response.status_code == 200


def test_it_lists_budgets_and_spend(owner_client: Client) -> None:
    GlobalBudget.objects.create(daily_usd_micros=5_000_000)
    DailySpend.objects.create(day=NOW.date(), usd_micros=12)
    ProviderSpend.objects.create(day=NOW.date(), provider="anthropic", usd_micros=12)

    for model in ["globalbudget", "dailyspend", "providerspend"]:
        assert owner_client.get(reverse(f"admin:kernel_{model}_changelist")).status_code == 200


def test_it_shows_a_run_with_its_steps(owner_client: Client) -> None:
    run = make_run()
    Step.objects.create(
        run=run, seq=1, kind="tool_call", effect="read", name="web.fetch", request_hash="h",
        idempotency_key="k", started_at=NOW,
    )  # fmt: skip

    response = owner_client.get(reverse("admin:kernel_run_change", args=[run.pk]))

    assert response.status_code == 200
    assert b"web.fetch" in response.content


def test_it_lets_the_owner_change_a_runs_caps_but_not_its_status(owner_client: Client) -> None:
    run = make_run()

    response = owner_client.post(
        reverse("admin:kernel_run_change", args=[run.pk]),
        change_form(run, max_turns=25, max_usd_micros=1_000_000, status=RunStatus.DONE),
    )

    assert response.status_code == 302, response.content
    run.refresh_from_db()
    assert (run.max_turns, run.max_usd_micros) == (25, 1_000_000)
    assert run.status == RunStatus.QUEUED


@pytest.mark.parametrize("model", ["run", "step", "event", "artifact", "wait"])
def test_it_forbids_adding_kernel_records(owner_client: Client, model: str) -> None:
    response = owner_client.get(reverse(f"admin:kernel_{model}_add"))

    assert response.status_code == 403


def test_it_forbids_deleting_a_run(owner_client: Client) -> None:
    run = make_run()

    response = owner_client.get(reverse("admin:kernel_run_delete", args=[run.pk]))

    assert response.status_code == 403


def test_it_allows_one_global_budget_only(owner_client: Client) -> None:
    add_url = reverse("admin:kernel_globalbudget_add")
    assert owner_client.get(add_url).status_code == 200

    response = owner_client.post(add_url, {"daily_usd_micros": 2_000_000, "max_running_runs": 8})

    assert response.status_code == 302
    assert GlobalBudget.objects.get().max_running_runs == 8
    assert owner_client.get(add_url).status_code == 403
