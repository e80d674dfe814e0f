"""On a phone: an agent asks to act, the owner sees it on Home, reads it and approves; the run
goes on in the real stack's worker."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from approvals.models import Approval
from kernel.models import Run, RunStatus
from missions.models import Mission, Project
from tests.browser.asking import ACTION, start_agent_asking
from tests.browser.conftest import screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tests.polling import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_approves_from_home_on_a_phone_and_the_run_goes_on(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    assert stack.wait_for_workers()["workers"]["state"] == "up", stack.log()
    project = Project.objects.create(name="release")
    mission = Mission.objects.create(project=project, goal="Publish the 1.3 release notes")
    run = start_agent_asking(mission)
    approval = wait_for(
        lambda: Approval.objects.filter(run=run).first(),
        timeout=30,
        message="the agent to ask for approval",
        interval=0.2,
    )

    sign_in(page, stack, live_owner)

    expect(page).to_have_url(stack.url + "/")
    waiting = page.locator("#waiting")
    expect(waiting).to_contain_text(ACTION)
    expect(waiting).to_contain_text("Publish the 1.3 release notes")
    expect(waiting.locator("time")).to_be_visible()  # when the list was collected
    screenshot(page, "approvals-home")

    # Titled by what approving does, not by the tool's name.
    waiting.get_by_role("link", name=re.compile(r"^Do what the agent describes: ")).click()

    expect(page).to_have_url(f"{stack.url}/approvals/{approval.pk}/")
    expect(page.locator("#approval-status")).to_have_text("waiting for you")
    expect(page.locator("pre.call")).to_contain_text(ACTION)
    expect(page.get_by_text("The notes are final; the team expects them.").first).to_be_visible()
    screenshot(page, "approval-pending")

    page.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator("#approval-status")).to_have_text("approved")
    expect(page.locator("#outcome")).to_contain_text("You approved this call")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    screenshot(page, "approval-approved")
    assert page.csp_violations == []  # type: ignore[attr-defined]

    def finished() -> Run | None:
        run.refresh_from_db()
        return run if run.is_terminal else None

    ended = wait_for(finished, timeout=30, message="the run to end", interval=0.2)
    assert ended.status == RunStatus.DONE, stack.log()
    assert isinstance(run.output, dict)
    assert run.output["answer"].endswith("Sent.")
