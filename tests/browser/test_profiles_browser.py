"""Profiles on a phone (390 wide) and a laptop (1280 wide), against the real stack: the owner
opens a profile on Agents & policies, is told exactly what is wrong with a bad edit, saves a good
one, and reads completion per profile on the Costs screen."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from missions.models import Profile
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.layout import no_sideways_scroll
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("seeded_profiles"),
]

LAPTOP = {"width": 1280, "height": 800}


def test_it_edits_a_profile_and_shows_costs_per_profile(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    sign_in(page, stack, live_owner)
    page.goto(stack.url + "/agents/")
    profiles = page.locator("#profiles")
    expect(profiles.get_by_role("heading", name="Profiles")).to_be_visible()
    research = profiles.locator('li[data-profile="research"]')
    research.get_by_text("Change").click()
    no_sideways_scroll(page)
    assert_accessible(page)

    research.get_by_label("Tools").fill("read_file teleport")
    research.get_by_role("button", name="Save the profile").click()
    research = page.locator('#profiles li[data-profile="research"]')
    expect(research.get_by_text("No tool named teleport")).to_be_visible()
    no_sideways_scroll(page)
    screenshot(page, "profile-refused")
    assert_accessible(page)

    research.get_by_label("Tools").fill("read_file list_files shell")
    research.get_by_label("Checks").fill("Each claim cites its source.")
    research.get_by_role("button", name="Save the profile").click()
    research = page.locator('#profiles li[data-profile="research"]')
    expect(research).to_contain_text("3 tools · 1 check")
    stored = Profile.objects.get(name="research")
    assert (stored.tools, stored.criteria) == (
        ["read_file", "list_files", "shell"],
        ["Each claim cites its source."],
    )

    page.set_viewport_size(LAPTOP)  # type: ignore[arg-type]  # a ViewportSize dict
    no_sideways_scroll(page)
    screenshot(page, "profiles-laptop")
    assert_accessible(page)

    for width in (LAPTOP, {"width": 390, "height": 844}):
        page.set_viewport_size(width)  # type: ignore[arg-type]  # a ViewportSize dict
        page.goto(stack.url + "/costs/")
        expect(page.get_by_role("heading", name="Per profile")).to_be_visible()
        expect(page.get_by_text("No mission was started with a profile")).to_be_visible()
        no_sideways_scroll(page)
        assert_accessible(page)
    assert not page.csp_violations  # type: ignore[attr-defined]
