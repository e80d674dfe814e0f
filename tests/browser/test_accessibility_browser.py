"""axe-core on every screen of the console, on a phone (390 by 844), against the real stack: no
serious or critical violation anywhere, signed out (sign-in, 404) or in, each screen with
something on it (a mission waiting for an approval and another for an answer, notes in memory)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect
from pytest_django.fixtures import Settings

from agentos.core import shell
from approvals.models import Approval, Question
from kernel.models import Run, RunStatus
from memory import store
from memory.store import Draft
from tests.browser.conftest import axe_violations, screenshot
from tests.browser.test_console_browser import APPROVAL_TURN, QUESTION_TURN, start_agent
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tests.polling import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def console_screens(approval: Approval, question: Question, note: str) -> dict[str, str]:
    """Every screen the console routes to with a GET, by the name its screenshot gets."""
    run = approval.run
    step = run.steps.order_by("seq").first()
    assert step is not None
    mission = run.account.mission
    # The console's navigation (built screens and placeholders alike), then the pages under them.
    screens = {screen.slug: screen.url for screen in shell.SCREENS}
    return {
        **screens,
        "mission-new": reverse("console:mission-new"),
        "mission": reverse("console:mission", args=[mission.pk]),
        "run": reverse("console:run", args=[run.pk]),
        "run-stop-confirm": reverse("console:run", args=[run.pk]) + "?confirm=stop",
        "run-fork-confirm": reverse("console:run", args=[run.pk]) + f"?fork={step.seq}",
        "run-trace": reverse("console:run-trace", args=[run.pk]),
        "approval": reverse("console:approval", args=[approval.pk]),
        "question": reverse("console:question", args=[question.pk]),
        "project": reverse("console:project", args=[mission.project_id]),
        "memory-search": reverse("console:memory") + "?q=blue-green+deploys",
        "memory-scope": reverse("console:memory-scope", kwargs={"scope": "global"}),
        "memory-note": reverse("console:memory-note", kwargs={"scope": "global", "path": note}),
        "kill-switch": reverse("console:kill-switch"),
        "more": reverse("console:more"),
        "offline": reverse("console:offline"),
        "not-found": "/missions/999999/",
    }


def test_no_screen_has_a_serious_or_critical_accessibility_violation(
    page: Page, stack: Stack, live_owner: Owner, settings: Settings
) -> None:
    assert stack.wait_for_workers()["workers"]["state"] == "up", stack.log()
    assert stack.data_dir is not None
    settings.MEMORY_DIR = stack.data_dir / "memory"  # the stack's
    kept, ended = store.write(
        "global",
        [
            Draft("Deploys use blue-green", "Switch traffic with the LB flag.", source_events=(1,)),
            Draft("Deploys happen on Fridays", "No longer.", verified_by="owner"),
        ],
        author="run:1",
        message="Two facts",
    )
    store.invalidate("global", ended, author="owner", reason="We stopped that.")
    asking = start_agent([APPROVAL_TURN, {"text": "Done."}])
    answering = start_agent([QUESTION_TURN, {"text": "Done."}])
    approval = wait_for(
        lambda: Approval.objects.filter(run=asking).first(),
        timeout=30,
        message="the agent to ask for approval",
        interval=0.2,
    )
    question = wait_for(
        lambda: Question.objects.filter(run=answering).first(),
        timeout=30,
        message="the agent to ask a question",
        interval=0.2,
    )

    def waiting() -> Run | None:
        found = Run.objects.get(pk=asking.pk)
        return found if found.status == RunStatus.WAITING else None

    wait_for(waiting, timeout=30, message="the asking run to wait", interval=0.2)
    found: dict[str, list[str]] = {}

    page.goto(stack.url + "/login/")
    found["sign-in"] = axe_violations(page)
    page.get_by_role("button", name="Sign in").click()  # empty: each field's error
    expect(page.get_by_label("Username")).to_have_attribute("aria-invalid", "true")
    found["sign-in-empty"] = axe_violations(page)
    page.get_by_label("Username").fill(live_owner.username)
    page.get_by_label("Password").fill(live_owner.password)
    page.get_by_role("button", name="Sign in").click()  # no code: refused
    expect(page.locator("#signin-error")).to_be_visible()
    found["sign-in-refused"] = axe_violations(page)
    page.goto(stack.url + "/nowhere/at/all/")
    found["not-found-signed-out"] = axe_violations(page)

    sign_in(page, stack, live_owner)
    expect(page.get_by_role("heading", name="Home")).to_be_visible()
    for name, path in console_screens(approval, question, kept).items():
        response = page.goto(stack.url + path)
        assert response is not None
        assert response.status == (404 if name == "not-found" else 200), name
        found[name] = axe_violations(page)
        screenshot(page, f"a11y-{name}")

    # Forms sent back with their errors.
    page.goto(stack.url + reverse("console:projects"))
    page.get_by_role("button", name="Add the project").click()
    expect(page.locator(".errorlist").first).to_be_visible()
    found["projects-refused"] = axe_violations(page)
    page.goto(stack.url + reverse("console:mission-new"))
    page.get_by_role("button", name="Start mission").click()
    expect(page.locator(".errorlist").first).to_be_visible()
    found["mission-new-refused"] = axe_violations(page)
    page.goto(stack.url + reverse("console:memory-note", kwargs={"scope": "global", "path": kept}))
    page.get_by_role("button", name="Invalidate the note").click()
    expect(page.locator(".errorlist").first).to_be_visible()
    found["memory-note-refused"] = axe_violations(page)

    failing = {name: lines for name, lines in found.items() if lines}
    report = [
        f"{name}:\n" + "\n".join(f"  {line}" for line in lines) for name, lines in failing.items()
    ]
    assert not failing, "axe-core, serious or critical:\n" + "\n".join(report)
    assert page.csp_violations == []  # type: ignore[attr-defined]

    # The check itself sees what it should: a button without a name is a critical violation.
    page.evaluate("() => document.querySelector('main').append(document.createElement('button'))")
    assert any(line.startswith("button-name (critical)") for line in axe_violations(page))
