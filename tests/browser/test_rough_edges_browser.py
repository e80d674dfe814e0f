"""The console's rough edges, measured in Chromium against the real stack, on a phone (390 by
844) and a laptop (1280 by 800): no page is wider than the screen with a 120-character name in
it, every screen is axe-clean, the run's answer and the mission's result are in view when the
page opens, a relaunch takes two taps with Start in view, a refused form opens on its error,
the new token is copied in one tap and Revoke is on screen, role names wrap by word."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import Browser, Locator, Page, ViewportSize, expect

from agentos.core import shell
from kernel.models import Run
from missions.launch import create_mission
from missions.models import Mission, Project, Role, RoleRoute
from tests.browser.conftest import PHONE, axe_violations, screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack, running_stack
from tests.polling import wait_for
from tests.providers.anthropic_wire import reply, text
from tests.providers.wire import Stream, WireServer, wire_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

LAPTOP: ViewportSize = {"width": 1280, "height": 800}
# 120 characters without a space: what widened a page to 1,560 px.
LONG_NAME = "Quarterly-infrastructure-review-" + "x" * 88
LONG_GOAL = "Summarise-" + "y" * 110 + " then write the notes."
ANSWER = "The review lists 14 changes since the last quarter."
SCRIPTED = {"executor": {"provider": "scripted", "model": "scripted"}}
RUN_SECONDS = 60


def finished_mission(stack: Stack, *, scripted: bool = True) -> tuple[Mission, Run]:
    """A mission of a project with a long name, run to its end by the stack's workers: on the
    offline scripted model, or on the default route (a local model server)."""
    assert stack.wait_for_workers()["workers"]["state"] == "up", stack.log()
    project, _ = Project.objects.get_or_create(name=LONG_NAME)
    mission, root = create_mission(
        project=project,
        goal=LONG_GOAL,
        routes=SCRIPTED if scripted else None,
        trigger="console",
        script={"turns": [{"text": ANSWER}]} if scripted else None,
    )

    def ended() -> Run | None:
        found = Run.objects.get(pk=root.pk)
        return found if found.is_terminal else None

    return mission, wait_for(ended, timeout=RUN_SECONDS, message="the mission to end", interval=0.2)


def width_fits(page: Page) -> tuple[int, int]:
    scroll, inner = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    return int(scroll), int(inner)


def in_view(target: Locator) -> None:
    """On screen without any scrolling: the page opened with it visible."""
    expect(target).to_be_in_viewport()
    assert target.page.evaluate("window.scrollY") == 0


@pytest.fixture
def model_stack(
    live_owner: Owner, seeded_catalog: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Stack, WireServer]]:
    """The stack with a key for the default executor's provider, whose SDK calls a local server
    speaking its wire format: a goal of the owner's can start (and start again)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-rough-edges")
    with wire_server() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        for _ in range(4):  # the mission, its relaunch, and room for another call
            server.queue(Stream(reply(text(0, ANSWER))))
        with running_stack(tmp_path) as stack:
            yield stack, server


@pytest.fixture(params=["phone", "laptop"])
def any_page(request: pytest.FixtureRequest, browser: Browser) -> Iterator[Page]:
    if request.param == "phone":
        context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True)
    else:
        context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    violations: list[str] = []
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.csp_violations = violations  # type: ignore[attr-defined]  # read by the tests
    yield page
    context.close()


def test_every_screen_fits_its_width_and_is_accessible_with_long_names(
    any_page: Page, stack: Stack, live_owner: Owner
) -> None:
    page = any_page
    mission, root = finished_mission(stack)
    sign_in(page, stack, live_owner)
    expect(page.get_by_role("heading", name="Home")).to_be_visible()
    screens = {
        **{screen.slug: screen.url for screen in shell.SCREENS},
        "mission": reverse("console:mission", args=[mission.pk]),
        "relaunch": reverse("console:mission-new") + f"?from={mission.pk}",
        "run": reverse("console:run", args=[root.pk]),
        "project": reverse("console:project", args=[mission.project_id]),
        "memory-scope": reverse(
            "console:memory-scope", kwargs={"scope": f"project/{mission.project_id}"}
        ),
    }
    size = "phone" if page.viewport_size == PHONE else "laptop"
    wide: dict[str, tuple[int, int]] = {}
    found: dict[str, list[str]] = {}
    for name, path in screens.items():
        response = page.goto(stack.url + path)
        assert response is not None
        assert response.status == 200, name
        scroll, inner = width_fits(page)
        if scroll > inner:
            wide[name] = (scroll, inner)
        found[name] = axe_violations(page)
        screenshot(page, f"rough-{size}-{name}")

    # Settings with a token in its table, then with its push sender refused.
    page.goto(stack.url + reverse("console:settings"))
    page.get_by_label("Name").first.fill(LONG_NAME)
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token")).to_be_visible()
    found["settings-token"] = axe_violations(page)
    page.get_by_label("Contact").fill("not a contact")
    page.get_by_role("button", name="Save the contact").click()
    expect(page.get_by_label("Contact")).to_have_attribute("aria-invalid", "true")
    found["settings-refused"] = axe_violations(page)
    scroll, inner = width_fits(page)
    if scroll > inner:
        wide["settings-refused"] = (scroll, inner)

    assert not wide, f"wider than the screen ({size}): {wide}"
    failing = {name: lines for name, lines in found.items() if lines}
    assert not failing, "axe-core, serious or critical:\n" + "\n".join(
        f"{name}:\n" + "\n".join(f"  {line}" for line in lines) for name, lines in failing.items()
    )
    assert not page.csp_violations  # type: ignore[attr-defined]


def test_it_relaunches_in_two_taps_with_the_result_and_start_in_view_on_a_phone(
    page: Page, model_stack: tuple[Stack, WireServer], live_owner: Owner
) -> None:
    stack, _server = model_stack
    mission, root = finished_mission(stack, scripted=False)
    sign_in(page, stack, live_owner)
    expect(page.get_by_role("heading", name="Home")).to_be_visible()

    # The run page opens on its answer, before its hashes (folded).
    page.goto(stack.url + reverse("console:run", args=[root.pk]))
    in_view(page.locator("#run-answer"))
    expect(page.locator("#run-engine")).not_to_be_visible()

    # The mission's page: relaunch in view; its result right under.
    page.goto(stack.url + reverse("console:mission", args=[mission.pk]))
    in_view(page.locator("#relaunch"))
    expect(page.locator("#mission-answer")).to_contain_text(ANSWER)
    expect(page.locator("#no-plan")).to_be_visible()
    taps = 0
    page.locator("#relaunch").click()
    taps += 1
    start = page.locator("#relaunch-start").get_by_role("button", name="Start mission")
    in_view(start)
    screenshot(page, "rough-relaunch-start")
    start.click()
    taps += 1

    expect(page).to_have_url(re.compile(r"/missions/\d+/$"))
    relaunched = Mission.objects.exclude(pk=mission.pk).get()
    expect(page).to_have_url(stack.url + reverse("console:mission", args=[relaunched.pk]))
    assert relaunched.goal == mission.goal
    assert taps <= 3
    assert not page.csp_violations  # type: ignore[attr-defined]


def test_a_phone_opens_a_refused_form_on_its_error_and_copies_a_token_in_one_tap(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    sign_in(page, stack, live_owner)
    expect(page.get_by_role("heading", name="Home")).to_be_visible()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)

    # A token: copied with one tap; Revoke on screen, not cut off at the right.
    page.goto(stack.url + reverse("console:settings"))
    page.get_by_label("Name").first.fill("ci")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#new-token").inner_text().strip()
    page.get_by_role("button", name="Copy the token").click()
    expect(page.locator('[data-copied="new-token"]')).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    revoke = page.locator("#tokens").get_by_role("button", name="Revoke")
    revoke.scroll_into_view_if_needed()
    box = revoke.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= PHONE["width"]

    # The push sender's form is far down Settings: refused, the page opens on its field.
    page.goto(stack.url + reverse("console:settings"))
    page.get_by_label("Contact").fill("me@example.org")  # no mailto:
    page.get_by_role("button", name="Save the contact").click()
    contact = page.get_by_label("Contact")
    expect(contact).to_have_attribute("aria-invalid", "true")
    expect(contact).to_be_focused()
    expect(contact).to_be_in_viewport()
    assert page.evaluate("window.scrollY") > 0  # it was below the fold
    screenshot(page, "rough-settings-refused")

    # Role names wrap by word beside a long status, never letter by letter.
    for role in Role:
        RoleRoute.objects.update_or_create(
            role=role, defaults={"provider": "anthropic", "model": "claude-opus-5-5"}
        )
    page.goto(stack.url + reverse("console:agents"))
    titles = page.locator('[aria-labelledby="roles-title"] .list-item-title')
    expect(titles.first).to_be_visible()
    lines = page.evaluate(
        """() => [...document.querySelectorAll('[aria-labelledby="roles-title"] .list-item-title')]
            .map(el => Math.round(el.getBoundingClientRect().height
                                  / parseFloat(getComputedStyle(el).lineHeight)))"""
    )
    assert lines
    assert max(lines) == 1, lines
    assert width_fits(page)[0] <= PHONE["width"]
    screenshot(page, "rough-agents")
    assert not page.csp_violations  # type: ignore[attr-defined]
