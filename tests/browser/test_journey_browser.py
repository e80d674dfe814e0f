"""The owner's whole journey on a phone (390 by 844), on the real stack as `make run` starts it
(with its demo mission): sign in, see what waits, approve the demo's push in at most three taps
without scrolling, answer an agent's question, run an offline mission without any key and read
its report, add a key in Settings and test it against a local model server, fork a run after
confirming, and stop everything. Each screen is screenshotted and checked with axe-core."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from approvals.models import Approval, Question
from kernel.models import Run, RunStatus
from missions import demo
from missions.models import Mission, Project
from tests.browser.conftest import ARTIFACTS, PHONE, assert_accessible, screenshot
from tests.browser.test_console_browser import QUESTION_TURN, start_agent
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack, running_stack
from tests.polling import wait_for
from tests.providers.anthropic_wire import reply, text
from tests.providers.wire import Stream, WireServer, wire_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    # Measured 14 s, and 7 s to set up; it may wait DEMO_SECONDS for the demo's push.
    pytest.mark.timeout(300),
]

KEY = "sk-ant-journey-7f3a"
# The demo's push, as Home titles it (`approvals.inbox.sentence`).
PUSH_TITLE = re.compile(r"Push (one commit |\d+ commits? )?to ")
ANSWER = "Yes, a short post on the blog."
SECOND_QUESTION = {
    "text": "Noted.",
    "tool_calls": [{"name": "ask_owner", "arguments": {"question": "Tweet it too?"}}],
}
# The demo plays a dozen sandboxed steps before its push waits; a run's report, a few.
DEMO_SECONDS = 120
RUN_MS = 60_000


@pytest.fixture
def model_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireServer]:
    """A local server speaking Anthropic's wire format; the stack's SDK is pointed at it by the
    variable an owner sets to use a gateway. No key in the environment: Settings sets it."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with wire_server() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        yield server


@pytest.fixture
def demo_stack(
    live_owner: Owner, seeded_catalog: None, model_server: WireServer, tmp_path: Path
) -> Iterator[Stack]:
    with running_stack(tmp_path, demo=True) as stack:
        yield stack
    # The demo's repositories live in the stack's own workspace root, not under tmp_path.
    project = Project.objects.filter(name=demo.PROJECT).first()
    if project is not None:
        shutil.rmtree(Path(project.repository).parent.parent, ignore_errors=True)


class Taps:
    """Taps of a phone's thumb, each on something in view without scrolling."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.count = 0

    def tap(self, target: Locator) -> None:
        expect(target).to_be_in_viewport()
        assert self.page.evaluate("window.scrollY") == 0
        target.click()
        self.count += 1


def no_sideways_scroll(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def visit(page: Page, name: str) -> None:
    """What every screen of the journey must be: no sideways scroll, no serious or critical
    accessibility violation; and a screenshot of it."""
    no_sideways_scroll(page)
    screenshot(page, f"journey-{name}")
    assert_accessible(page)


def finished(run: Run) -> Run | None:
    found = Run.objects.get(pk=run.pk)
    return found if found.is_terminal else None


def test_the_owner_walks_the_whole_journey_on_a_phone(
    page: Page, demo_stack: Stack, model_server: WireServer, live_owner: Owner
) -> None:
    stack = demo_stack
    asking = start_agent([QUESTION_TURN, SECOND_QUESTION, {"text": "Done."}])
    assert "Demo mission started" in stack.log(), stack.log()
    push = wait_for(
        lambda: Approval.objects.filter(state="open", question__tool="git_push").first(),
        timeout=DEMO_SECONDS,
        message="the demo to ask to push",
        interval=0.2,
    )
    question = wait_for(
        lambda: Question.objects.filter(run=asking).first(),
        timeout=30,
        message="the agent to ask a question",
        interval=0.2,
    )

    # Sign in; Home says what waits: the demo's push and the agent's question.
    page.goto(stack.url + "/")
    visit(page, "sign-in")
    sign_in(page, stack, live_owner)
    expect(page).to_have_url(stack.url + "/")
    waiting = page.locator("#waiting")
    expect(waiting).to_contain_text("Make the tests of the calc project pass")
    expect(waiting).to_contain_text(PUSH_TITLE)  # what approving does, not the tool's name
    expect(waiting).to_contain_text("Announce it on the blog?")
    visit(page, "home")

    # The demo's push: approved in at most three taps, none of them after a scroll.
    taps = Taps(page)
    taps.tap(waiting.get_by_role("link", name=PUSH_TITLE))
    expect(page).to_have_url(f"{stack.url}/approvals/{push.pk}/")
    expect(page.locator("#approval-status")).to_have_text("waiting for you")
    visit(page, "approval")
    page.screenshot(path=ARTIFACTS / "journey-approval-first-screen.png")  # what the thumb sees
    taps.tap(page.get_by_role("button", name="Approve", exact=True))
    expect(page.locator("#approval-status")).to_have_text("approved")
    assert taps.count <= 3
    assert page.evaluate("window.scrollY") == 0
    visit(page, "approval-approved")
    pushed = wait_for(
        lambda: finished(push.run), timeout=60, message="the demo run to end", interval=0.2
    )
    assert pushed.status == RunStatus.DONE

    # The agent's question, answered in the owner's words.
    page.get_by_role("link", name="Home", exact=True).click()
    page.locator("#waiting").get_by_role("link", name="Question").click()
    expect(page).to_have_url(f"{stack.url}/questions/{question.pk}/")
    expect(page.locator(".agent-text").first).to_have_text("Announce it on the blog?")
    visit(page, "question")
    page.get_by_label("Your answer").fill(ANSWER)
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator("#outcome")).to_contain_text(ANSWER)
    visit(page, "question-answered")

    # An offline mission, no model key anywhere: the tests of the demo's project, reported.
    page.get_by_role("link", name="Missions", exact=True).click()
    visit(page, "missions")
    page.get_by_role("link", name="New mission").click()
    expect(page.locator("#no-model")).to_contain_text("No model can be called yet")
    page.get_by_label("Project", exact=True).select_option(label=demo.PROJECT)
    page.get_by_label("Run the tests and report what fails").check()
    visit(page, "mission-new")
    page.get_by_role("button", name="Start mission").click()
    expect(page).to_have_url(re.compile(rf"{stack.url}/missions/\d+/$"))
    offline = Mission.objects.order_by("-pk").first()
    assert offline is not None
    assert offline.project.name == demo.PROJECT
    page.locator("#run-tree").get_by_role("link", name=re.compile(r"^Run \d+")).first.click()
    expect(page.locator("#run-state")).to_have_text("done", timeout=RUN_MS)
    report = page.locator("#run-answer")
    expect(report).to_contain_text("Test command: python3 -m unittest discover -v")
    expect(report).to_contain_text("Result: the test command")
    visit(page, "offline-report")

    # Fork the offline run from its first recorded step, after saying yes.
    run_url = page.url
    page.get_by_role("link", name="Fork from here…").first.click()
    fork_card = page.locator("#fork")
    expect(fork_card).to_contain_text(re.compile(r"Fork run \d+ from step \d+\?"))
    visit(page, "fork-confirm")
    runs_before = Run.objects.count()
    fork_card.get_by_role("button", name=re.compile(r"^Yes, fork from step \d+$")).click()
    expect(page.locator("[data-flash]")).to_contain_text("its first steps are the recorded ones")
    assert page.url != run_url
    expect(page.get_by_text("Forked from")).to_be_visible()
    assert Run.objects.count() > runs_before
    visit(page, "forked")

    # A key in Settings, tested against the local model server; never shown again.
    page.get_by_role("link", name="Settings", exact=True).click()
    card = page.locator("#provider-anthropic")
    card.get_by_label("API key").fill(KEY)
    card.get_by_role("button", name="Save key").click()
    expect(page.get_by_text("Anthropic: the key is saved.")).to_be_visible()
    card = page.locator("#provider-anthropic")
    expect(card).to_contain_text("ready")
    model_server.queue(Stream(reply(text(0, "OK"), output_tokens=2)))
    card.get_by_role("button", name="Test", exact=True).click()
    expect(page.locator("#trial-anthropic")).to_contain_text("Test passed.")
    assert KEY not in page.content()
    visit(page, "settings-key-tested")
    # The stack keeps its own vault: the key it sent is the proof that it stored it.
    trial = [sent for sent in model_server.received if sent.path == "/v1/messages"]
    assert len(trial) == 1, [(sent.method, sent.path) for sent in model_server.received]
    headers = {name.lower(): value for name, value in trial[0].headers.items()}
    # The SDK sends the key as a bearer token (older ones used x-api-key).
    assert KEY in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )

    # The kill switch: the agent asked again and waits; one confirmed tap stops it.
    wait_for(
        lambda: Question.objects.filter(run=asking, state="open").first(),
        timeout=30,
        message="the agent to ask again",
        interval=0.2,
    )
    page.get_by_role("link", name="Stop everything…").click()
    expect(page).to_have_url(stack.url + "/stop-everything/")
    visit(page, "kill-switch")
    page.get_by_role("button", name="Yes, stop everything now").click()
    stopped = page.locator("#stopped")
    expect(stopped).to_contain_text("Stopped")
    expect(stopped.get_by_role("link", name=str(asking.pk), exact=True)).to_be_visible()
    visit(page, "stopped")
    cancelled = wait_for(
        lambda: finished(asking), timeout=30, message="the asking run to end", interval=0.2
    )
    assert cancelled.status == RunStatus.CANCELLED
    assert page.csp_violations == []  # type: ignore[attr-defined]
