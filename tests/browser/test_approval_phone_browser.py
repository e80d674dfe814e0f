"""On a phone (390 by 844): a long approval, with many changed files and a long justification,
still shows what will happen first and its Approve button without scrolling."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from approvals.models import Approval
from kernel.models import Run, RunStatus, Wait
from missions.models import Mission, Project
from tests.browser.asking import ACTION, start_agent_asking
from tests.browser.conftest import ARTIFACTS, screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tests.polling import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def long_diff(files: int, lines: int) -> str:
    parts = []
    for number in range(files):
        path = f"src/module_{number}.py"
        body = "\n".join(f"+value_{line} = {line}" for line in range(lines))
        parts.append(
            f"diff --git a/{path} b/{path}\nindex 3b18e51..a9c4f2e 100644\n--- a/{path}\n"
            f"+++ b/{path}\n@@ -0,0 +1,{lines} @@\n{body}"
        )
    return "\n".join(parts)


def test_the_approve_button_is_in_view_without_scrolling_on_a_phone(
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
    # What a big change shows: a long justification and twelve files of forty lines each.
    request = dict(approval.request)
    request["justification"] = "The notes are final; the team expects them. " * 20
    diff = long_diff(12, 40)
    request["preview"] = {
        "diff": diff,
        "diff_chars": len(diff),
        "files": [
            {"path": f"src/module_{n}.py", "status": "M", "size": 900 + n} for n in range(12)
        ],
        "files_total": 12,
    }
    Wait.objects.filter(pk=approval.pk).update(question=request)

    sign_in(page, stack, live_owner)
    page.goto(f"{stack.url}/approvals/{approval.pk}/")

    expect(page.locator("#approval-summary")).to_have_text(f"Do what the agent describes: {ACTION}")
    expect(page.locator("#approval-summary")).to_be_in_viewport()
    approve = page.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_in_viewport()
    expect(page.get_by_role("button", name="Refuse", exact=True)).to_be_in_viewport()
    expect(page.locator("details.diff-file-block")).to_have_count(12)
    assert page.evaluate("window.scrollY") == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / "approval-phone-first-screen.png")  # what the owner sees
    screenshot(page, "approval-phone-full")

    unfolded = page.locator("details.diff-file-block").nth(3)
    unfolded.locator("summary").click()
    expect(unfolded.get_by_text("+value_39 = 39")).to_be_visible()
    expect(
        page.locator("details.diff-file-block").nth(4).get_by_text("+value_0 = 0")
    ).to_be_hidden()
    expect(approve).to_be_in_viewport()  # still at hand further down
    approve.click()

    expect(page.locator("#approval-status")).to_have_text("approved")
    assert page.csp_violations == []  # type: ignore[attr-defined]

    def finished() -> Run | None:
        run.refresh_from_db()
        return run if run.is_terminal else None

    ended = wait_for(finished, timeout=30, message="the run to end", interval=0.2)
    assert ended.status == RunStatus.DONE, stack.log()
