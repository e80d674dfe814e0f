"""On a phone: a worker of the real stack dies right after a payment took effect, before its
result was recorded; the owner finds the question on Home, reads the exact call and says it
happened; the run goes on with the owner's result and the payment is never made twice."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from approvals.models import Reconciliation
from kernel.models import ChaosEffect, Run, Step
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.kernel.factories import start
from tests.live import Stack, running_stack
from tests.polling import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAY = 5  # chaos.workflow's non-idempotent step without a probe


@pytest.fixture
def crashing_stack(
    live_owner: Owner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Stack, Run]]:
    run = start("chaos.workflow", {"n": 1, "timer_seconds": 0})
    plan = tmp_path / "plan.json"
    (tmp_path / "fired").mkdir()
    target = {"run": run.pk, "point": "after_effect_before_result", "seq": PAY}
    plan.write_text(json.dumps({"targets": [target], "fired_dir": str(tmp_path / "fired")}))
    monkeypatch.setenv("KERNEL_CRASHPLAN", str(plan))
    monkeypatch.setenv("AGENTOS_LEASE_SECONDS", "2")  # the dead worker's lease runs out soon
    monkeypatch.setenv("AGENTOS_KERNEL_POLL_SECONDS", "1")
    with running_stack(tmp_path / "data") as stack:
        yield stack, run


def test_it_answers_an_unknown_outcome_from_home_on_a_phone(
    page: Page, crashing_stack: tuple[Stack, Run], live_owner: Owner
) -> None:
    stack, run = crashing_stack
    wait = wait_for(
        lambda: Reconciliation.objects.filter(run=run).first(),
        timeout=90,
        message="the run to ask about the payment",
        interval=0.2,
    )
    assert ChaosEffect.objects.filter(run_id_value=run.pk, seq=PAY).count() == 1

    sign_in(page, stack, live_owner)

    waiting = page.locator("#waiting")
    expect(waiting).to_contain_text("ledger.pay")
    waiting.get_by_role("link", name="Did it happen? ledger.pay").click()
    expect(page).to_have_url(f"{stack.url}/reconciliations/{wait.pk}/")
    expect(page.locator("pre.call")).to_contain_text('"value": 3')
    expect(page.locator("#probe")).to_contain_text("no check of its own")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    screenshot(page, "reconciliation-pending")
    assert_accessible(page)

    page.get_by_label("What it returned (optional)").fill("paid, receipt 42")
    page.get_by_role("button", name="It happened").click()

    expect(page.locator("#outcome")).to_contain_text("You said it happened")
    expect(page.locator("#outcome")).to_contain_text("paid, receipt 42")
    screenshot(page, "reconciliation-happened")
    assert_accessible(page)
    assert page.csp_violations == []  # type: ignore[attr-defined]

    def settled() -> Step | None:
        step = Step.objects.get(run=run, seq=PAY)
        return step if step.finished_at is not None else None

    step = wait_for(settled, timeout=30, message="the step to be settled", interval=0.2)
    assert step.result == {"output": "paid, receipt 42", "is_error": False}
    assert step.settled_by == "owner"
    assert ChaosEffect.objects.filter(run_id_value=run.pk, seq=PAY).count() == 1
