"""On a phone, against the real stack: a mission appears and changes on Home without a reload;
the owner opens its run tree, steers the run with a message it receives, approves what it asks,
and stops a run. Screenshots of each page go to .artifacts/screenshots/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from approvals.models import Approval
from kernel import runs
from kernel.models import Run, RunStatus, Step
from missions.models import Mission, OwnerMessage, Project
from tests.browser.conftest import screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tests.polling import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

GOAL = "Publish the 1.3 release notes"
ACTION = "Email the 1.3 release notes to the team list"
STEER = "Send them to the release list only, not to everyone."
# Live changes arrive through the event stream or a doorbell at once; without either, through
# the pages' 10-second poll. Waits are for text or selectors, never sleeps.
LIVE_MS = 25_000


def start_agent(turns: list[dict[str, Any]]) -> Run:
    """The real agent loop on the offline scripted model, with the owner tools."""
    project, _ = Project.objects.get_or_create(name="release")
    mission = Mission.objects.create(project=project, goal=GOAL)
    return runs.start_run(
        account=mission,
        program="agent",
        model="scripted",
        input={
            "goal": GOAL,
            "provider": "scripted",
            "model": "scripted",
            "tools": ["request_approval", "ask_owner"],
            "context_window": 100_000,
            "script": {"turns": turns},
        },
    )


APPROVAL_TURN = {
    "text": "I need your approval first.",
    "tool_calls": [
        {
            "name": "request_approval",
            "arguments": {"action": ACTION, "justification": "The notes are final."},
        }
    ],
}
QUESTION_TURN = {
    "text": "Sent. One more thing.",
    "tool_calls": [{"name": "ask_owner", "arguments": {"question": "Announce it on the blog?"}}],
}


def test_it_watches_a_mission_live_and_steers_and_approves_it_from_a_phone(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    assert stack.wait_for_workers()["workers"]["state"] == "up", stack.log()
    sign_in(page, stack, live_owner)
    expect(page).to_have_url(stack.url + "/")
    running = page.locator("#running")
    expect(running).to_contain_text("No mission is running.")
    page.evaluate("() => { window.agentosSamePage = true; }")  # gone if the page reloads

    run = start_agent([APPROVAL_TURN, QUESTION_TURN, {"text": "Done."}])

    # Home: the mission appears, then waits for the owner, with no reload.
    expect(running).to_contain_text(GOAL, timeout=LIVE_MS)
    expect(running.locator(f'[data-run-status="{run.pk}"]')).to_have_text(
        "waiting", timeout=LIVE_MS
    )
    expect(running).to_contain_text("1 wait for you", timeout=LIVE_MS)
    assert page.evaluate("() => window.agentosSamePage") is True
    expect(running.locator("time")).to_be_visible()
    screenshot(page, "console-home-live")

    # Mission: the run tree, who does what, and what waits.
    running.get_by_role("link", name=GOAL).click()
    expect(page).to_have_url(f"{stack.url}/missions/{run.account_id}/")
    tree = page.locator("#run-tree")
    expect(tree.locator(f'[data-run-status="{run.pk}"]')).to_have_text("waiting")
    expect(tree).to_contain_text("scripted/scripted")
    expect(tree).to_contain_text("Waiting for you: approval: request_approval")
    screenshot(page, "console-mission")

    # Run: its timeline, and a steering message while it waits.
    tree.get_by_role("link", name=f"Run {run.pk} · executor").click()
    expect(page).to_have_url(f"{stack.url}/runs/{run.pk}/")
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("I need your approval first.")
    expect(timeline.locator("pre.call").first).to_contain_text(ACTION)
    page.get_by_label("Message to the agent").fill(STEER)
    page.get_by_role("button", name="Send").click()
    expect(page.locator("[data-flash]")).to_contain_text("Sent.")
    expect(page.locator("#messages-sent")).to_contain_text("not delivered yet")
    screenshot(page, "console-run-steered")

    # Approve what it asks: the run goes on, and its next model call receives the message.
    timeline.get_by_role("link", name="Decide").click()
    approval = Approval.objects.get(run=run)
    expect(page).to_have_url(f"{stack.url}/approvals/{approval.pk}/")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#approval-status")).to_have_text("approved")

    page.goto(f"{stack.url}/runs/{run.pk}/")
    expect(page.locator("#messages-sent")).to_contain_text("delivered at step", timeout=LIVE_MS)
    expect(page.locator("#timeline")).to_contain_text(STEER, timeout=LIVE_MS)
    expect(page.locator("#timeline")).to_contain_text("Announce it on the blog?", timeout=LIVE_MS)
    screenshot(page, "console-run-timeline")

    message = OwnerMessage.objects.get(run=run)
    assert message.delivered_seq is not None
    step = Step.objects.get(run=run, seq=message.delivered_seq)
    assert step.kind == "model_call"
    assert isinstance(step.result, dict)
    assert step.result["owner_messages"] == [STEER]
    assert page.csp_violations == []  # type: ignore[attr-defined]


def test_it_stops_a_run_from_its_page_after_confirming(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    assert stack.wait_for_workers()["workers"]["state"] == "up", stack.log()
    run = start_agent([QUESTION_TURN, {"text": "Done."}])

    def waiting() -> Run | None:
        found = Run.objects.get(pk=run.pk)
        return found if found.status == RunStatus.WAITING else None

    wait_for(waiting, timeout=30, message="the run to wait", interval=0.2)
    sign_in(page, stack, live_owner)
    page.goto(f"{stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-state")).to_have_text("waiting")

    page.get_by_role("link", name="Stop…").click()
    expect(page.locator("#stop")).to_contain_text("Stop this run?")
    screenshot(page, "console-run-stop-confirm")
    assert Run.objects.get(pk=run.pk).cancel_requested is False  # asking changed nothing
    page.get_by_role("button", name=f"Yes, stop run {run.pk}").click()

    expect(page.locator("[data-flash]")).to_contain_text("Stop requested for 1 run(s)")
    expect(page.locator("#run-state")).to_have_text("cancelled", timeout=LIVE_MS)
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    screenshot(page, "console-run-stopped")

    page.goto(f"{stack.url}/missions/")
    expect(page.get_by_role("link", name=GOAL)).to_be_visible()
    screenshot(page, "console-missions")
    page.goto(f"{stack.url}/missions/new/")
    expect(page.get_by_role("textbox", name="Goal", exact=True)).to_be_visible()
    screenshot(page, "console-mission-new")
    page.goto(f"{stack.url}/costs/")
    expect(page.locator("#costs-models")).to_contain_text("scripted")
    screenshot(page, "console-costs")
    assert page.csp_violations == []  # type: ignore[attr-defined]
