"""The owner's second week on a phone (390 by 844), on one real stack: sign in with a password and
a code, add a passkey, sign in again with the password and the passkey; a schedule made on the
Schedules screen fires and its mission's end is pushed to the phone, whose notification opens
the mission and its report; a webhook made on the Webhooks screen starts a mission from a signed
delivery; the API still answers 401 before 405 and a phone's token reads but starts nothing.
Every screen is checked with axe-core and for sideways scroll, then again on a laptop (1280 by
800). The push service's leg is played as in test_notifications_browser (`tests.browser.pushes`).
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import httpx
import pytest
from playwright.sync_api import Browser as Chromium
from playwright.sync_api import ConsoleMessage, Page, ViewportSize, expect

from agentos.core import tokens
from approvals.models import Approval, Notification
from approvals.notifications import ENDS
from kernel.models import TERMINAL, Run
from missions import cron, endpoints, firing
from missions.models import (
    FiringOutcome,
    Mission,
    Project,
    RoleRoute,
    Schedule,
    ScheduleFiring,
    Webhook,
)
from tests.approvals.test_push import Browser, PushService, service
from tests.browser.asking import start_agent_asking
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.layout import no_sideways_scroll
from tests.browser.passkeys import console_url, virtual_authenticator
from tests.browser.pushes import device, registration_id, shown
from tests.browser.webhooks import deliver, wire
from tests.factories import Owner
from tests.live import Stack
from tests.polling import wait_for
from tests.providers.compatible_wire import MODEL, Chat
from tests.providers.wire import WireServer
from tests.tools.repositories import calc
from tools import workspace

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    # One stack for the whole week; the offline mission runs the calc tests in a sandbox.
    pytest.mark.timeout(420),
]
# Fixtures: the local push service, the phone subscribed to it, the local model server.
__all__ = ["device", "service", "wire"]

LAPTOP: ViewportSize = {"width": 1280, "height": 800}
MISSION_SECONDS = 120  # the offline mission's sandboxed test run, then its push


@pytest.fixture
def calc_project() -> Iterator[Project]:
    """The demo's calc project (its tests fail), where the stack's sandbox can reach it."""
    base = workspace.root() / "test-second-week" / uuid.uuid4().hex[:8]
    yield Project.objects.create(name="calc", repository=str(calc(base)))
    shutil.rmtree(base, ignore_errors=True)


def visit(page: Page, name: str) -> None:
    """The screen as it is now: no sideways scroll, no serious axe violation, a screenshot."""
    no_sideways_scroll(page)
    assert_accessible(page)
    screenshot(page, f"second-week-{name}")


def sign_in_with_passkey(page: Page, url: str, owner: Owner) -> None:
    """Password + TOTP, a passkey added in Settings, signed out, then password + passkey."""
    backup = owner.credentials.backup_codes
    page.goto(url + "/login/")
    page.get_by_label("Username").fill(owner.username)
    page.get_by_label("Password").fill(owner.password)
    page.get_by_label("Code").fill(owner.code())
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Home")).to_be_visible()

    page.goto(url + "/settings/#passkeys")
    card = page.locator("#passkeys")
    card.get_by_label("Name of the new passkey").fill("my phone")
    card.get_by_label("Current code").fill(backup[0])
    card.get_by_role("button", name="Add a passkey").click()
    expect(page.get_by_text("The passkey “my phone” is added.")).to_be_visible()
    visit(page, "settings-passkey")

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    visit(page, "login")
    page.get_by_label("Username").fill(owner.username)
    page.get_by_label("Password").fill(owner.password)
    page.get_by_role("button", name="Use a passkey").click()
    expect(page.get_by_role("heading", name="Home")).to_be_visible()
    visit(page, "home")


def schedule_nightly_tests(page: Page, url: str) -> Schedule:
    """The Schedules screen: an offline mission (no model key) at 09:00 UTC every day."""
    page.goto(url + "/more/")
    page.get_by_role("link", name="Schedules").click()
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Name", exact=True).fill("Nightly tests")
    page.get_by_label("Project").select_option(label="calc")
    page.get_by_label("Run the tests and report what fails").check()
    page.get_by_label("Time zone").select_option("UTC")
    page.get_by_label("When (cron expression)").fill("0 9 * * *")
    preview = page.locator("#cron-preview li")
    expect(preview).to_have_count(5)
    expect(preview.first).to_contain_text("09:00 UTC")
    visit(page, "schedule-new")
    page.get_by_role("button", name="Save the schedule").click()
    listing = page.locator("#schedule-list")
    expect(listing).to_contain_text("Nightly tests")
    expect(listing).to_contain_text("Next:")
    visit(page, "schedules")
    return Schedule.objects.get()


def fire(schedule: Schedule) -> int:
    """What the stack's minute task does at the schedule's next time, done now: its mission.

    Read from its history, not from what this call started: should the test run across 09:00
    UTC, the stack's own minute task may fire that time first (a due time fires once)."""
    after = schedule.created_at
    due = next(
        cron.due_times(
            schedule.cron, cron.zone("UTC"), after=after, until=after + timedelta(days=2)
        )
    )
    firing.fire_due(due + timedelta(seconds=30))
    fired = ScheduleFiring.objects.get(schedule=schedule, due_at=due)
    assert (fired.outcome, fired.error) == (FiringOutcome.STARTED, ""), fired.error
    assert fired.mission_id is not None
    return fired.mission_id


def pushed_end(service: PushService, device: Browser, mission_id: int) -> dict[str, str] | None:
    """The decrypted push of that mission, once its worker has posted it."""
    for received in list(service.received):
        payload = device.read(received)
        if payload.get("url") == f"/missions/{mission_id}/":
            return payload
    return None


def explained[T](
    predicate: Callable[[], T | None], *, timeout: float, message: str, explain: Callable[[], str]
) -> T:
    """`wait_for`, its failure saying what the state was when it gave up."""
    try:
        return wait_for(predicate, timeout=timeout, message=message, interval=0.2)
    except pytest.fail.Exception as failed:
        pytest.fail(f"{failed}; then: {explain()}")


def _status(run: Run) -> str:
    run.refresh_from_db()
    return f"{run.status}, {run.error or 'no error'}"


def _told(mission_id: int) -> str:
    rows = Notification.objects.filter(account_id=mission_id).values_list(
        "kind", "delivery", "attempts", "pushed_at"
    )
    return f"its notifications: {list(rows)}"


def create_webhook(page: Page, url: str) -> tuple[str, str]:
    """The Webhooks screen: an endpoint made, its URL and secret read while shown once."""
    page.goto(url + "/more/")
    page.get_by_role("link", name="Webhooks").click()
    page.get_by_label("Name").fill("deploys")
    page.get_by_label("Goal").fill("Check the deployment that was reported.")
    page.get_by_label("Risk class").select_option("research")
    page.get_by_role("button", name="Create the webhook").click()
    expect(page.locator("#webhook-created")).to_contain_text("will not be shown again")
    hook_url = page.locator("#webhook-url").inner_text().strip()
    secret = page.locator("#webhook-secret").inner_text().strip()
    visit(page, "webhook-created")
    return hook_url, secret


def on_a_laptop(browser: Chromium, page: Page, url: str, paths: list[str]) -> None:
    """The same session in a laptop's window: each screen fits and is axe-clean."""
    context = browser.new_context(viewport=LAPTOP, storage_state=page.context.storage_state())
    laptop = context.new_page()
    violations: list[str] = []

    def watch(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            violations.append(message.text)

    laptop.on("console", watch)
    try:
        for path in paths:
            laptop.goto(url + path)
            expect(laptop.locator("h1").first).to_be_visible()
            no_sideways_scroll(laptop)
            assert_accessible(laptop)
        assert violations == []
    finally:
        context.close()


def the_end_reaches_the_phone(
    page: Page, url: str, service: PushService, device: Browser, mission_id: int
) -> None:
    """The mission's end, pushed by the stack's worker, shown by the console's service worker;
    a tap opens the mission, whose run shows its report."""
    session, registration = registration_id(page)
    # In two waits, so that a failure says which half did not happen: the run's end, or its push.
    root = Run.objects.get(account_id=mission_id, parent__isnull=True)
    explained(
        lambda: Run.objects.filter(pk=root.pk, status__in=TERMINAL).exists(),
        timeout=MISSION_SECONDS,
        message=f"the scheduled mission's run {root.pk} to end",
        explain=lambda: _status(root),
    )
    payload = explained(
        lambda: pushed_end(service, device, mission_id),
        timeout=30,
        message=f"the end of mission {mission_id} to be pushed",
        explain=lambda: _told(mission_id),
    )
    session.send(
        "ServiceWorker.deliverPushMessage",
        {"origin": url, "registrationId": registration, "data": json.dumps(payload)},
    )
    (notification,) = wait_for(lambda: shown(page), timeout=30, message="the notification")
    root.refresh_from_db()
    assert root.status in TERMINAL
    assert notification["title"] == str(ENDS[root.status][1]) == "Mission done"
    assert notification["body"] == "Run the tests and report what fails."
    page.goto(url + notification["url"])  # what a tap opens
    expect(page.locator("h1")).to_have_text(f"Mission {mission_id}")
    expect(page.locator(f"[data-run-status='{root.pk}']")).to_have_text("done")
    result = page.locator("#mission-result")  # the mission's page shows its result
    expect(result).to_contain_text("Result: the test command failed")
    visit(page, "scheduled-mission")
    page.get_by_role("link", name=re.compile(rf"^Run {root.pk} · ")).click()
    report = page.locator("#run-answer")
    expect(report).to_contain_text("Test command: python3 -m unittest discover -v")
    expect(report).to_contain_text("Result: the test command failed")
    visit(page, "scheduled-report")


def fixed_edges(stack: Stack, owner: Owner, project: Project, mission_id: int) -> None:
    """401 before 405, with details; a phone's token (read + approve) reads, decides an
    approval, and starts nothing."""
    asking = Mission.objects.create(project=project, goal="Publish the 1.3 release notes")
    run = start_agent_asking(asking)
    refused = httpx.delete(stack.url + "/api/v1/missions", timeout=30)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthenticated"
    assert "details" in refused.json()["error"]
    phone = tokens.create_token(owner=owner.user, name="phone", scopes=["read", "approve"])
    bearer = {"Authorization": f"Bearer {phone.secret}"}
    read = httpx.get(f"{stack.url}/api/v1/missions/{mission_id}", headers=bearer, timeout=30)
    assert (read.status_code, read.json()["id"]) == (200, mission_id)
    approval = wait_for(
        lambda: Approval.objects.filter(run=run).first(),
        timeout=30,
        message="the agent to ask for approval",
        interval=0.2,
    )
    decided = httpx.post(
        f"{stack.url}/api/v1/approvals/{approval.pk}/decision",
        json={"approve": True, "args_hash": approval.request["args_hash"]},
        headers=bearer,
        timeout=30,
    )
    assert (decided.status_code, decided.json()["status"]) == (200, "approved"), decided.text
    started = httpx.post(
        stack.url + "/api/v1/missions",
        json={"project_id": project.pk, "goal": "Delete the backups."},
        headers=bearer,
        timeout=30,
    )
    assert started.status_code == 403, started.text
    assert Mission.objects.count() == 3  # the scheduled, the hooked, the asking one


def test_the_owners_second_week(
    page: Page,
    browser: Chromium,
    stack: Stack,
    live_owner: Owner,
    service: PushService,
    device: Browser,
    wire: WireServer,
    calc_project: Project,
) -> None:
    url = console_url(stack)  # passkeys need a name, not an address
    page.context.grant_permissions(["notifications"], origin=url)
    virtual_authenticator(page)
    stack.wait_for_workers()

    # A passkey signs in.
    sign_in_with_passkey(page, url, live_owner)

    # A schedule fires; its mission's end is pushed to the phone and opens the mission.
    schedule = schedule_nightly_tests(page, url)
    mission_id = fire(schedule)
    page.get_by_role("link", name="Nightly tests", exact=True).click()
    expect(page.locator("#history")).to_contain_text("Started")
    expect(
        page.locator("#history").get_by_role("link", name=f"Mission {mission_id}")
    ).to_be_visible()
    visit(page, "schedule-history")

    the_end_reaches_the_phone(page, url, service, device, mission_id)

    # A webhook starts a mission.
    wire.queue(Chat().text("Checked.").finish())
    endpoints.put(base_url=wire.url + "/v1", model=MODEL)
    RoleRoute.objects.update_or_create(
        role="executor", defaults={"provider": "compatible", "model": MODEL, "effort": ""}
    )
    hook_url, secret = create_webhook(page, url)
    assert hook_url.startswith(url + "/hooks/")
    answer = deliver(hook_url, secret, json.dumps({"version": "1.4"}).encode(), "deploy-1")
    assert answer.status_code == 202, answer.text
    hooked = answer.json()["mission_id"]
    assert Mission.objects.get(pk=hooked).goal == "Check the deployment that was reported."
    page.goto(url + "/webhooks/")
    page.get_by_role("link", name="deploys").click()
    deliveries = page.locator("#deliveries")
    expect(deliveries).to_contain_text("Accepted")
    deliveries.get_by_role("link", name=f"Mission {hooked}").click()
    expect(page.locator("h1")).to_have_text(f"Mission {hooked}")
    visit(page, "webhook-mission")

    # Fixed edges stay fixed.
    fixed_edges(stack, live_owner, calc_project, mission_id)
    assert page.csp_violations == []  # type: ignore[attr-defined]

    # The same screens on a laptop.
    hook = Webhook.objects.get()
    on_a_laptop(
        browser,
        page,
        url,
        [
            "/",
            "/schedules/",
            f"/schedules/{schedule.pk}/",
            "/webhooks/",
            f"/webhooks/{hook.pk}/",
            "/settings/",
        ],
    )
