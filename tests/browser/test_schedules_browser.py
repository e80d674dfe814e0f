"""The Schedules screen against the real stack, on a phone (390 by 844) and a laptop (1280 by
800): the next five times appear as the cron is typed, a refused cron is said next to its
field after submit, the schedule is listed with its next time, paused, and deleted after a
confirmation. No sideways scroll, no serious accessibility violation."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from missions.models import Project, Schedule
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.layout import no_sideways_scroll
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("viewport", [(390, 844), (1280, 800)], ids=["phone", "laptop"])
def test_the_owner_schedules_a_mission_pauses_it_and_deletes_it(
    page: Page, stack: Stack, live_owner: Owner, viewport: tuple[int, int]
) -> None:
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    Project.objects.get_or_create(name="notes")
    sign_in(page, stack, live_owner)
    page.goto(stack.url + "/more/")
    page.get_by_role("link", name="Schedules").click()
    page.get_by_role("link", name="New schedule").click()

    page.get_by_label("Time zone").select_option("Asia/Tokyo")
    page.get_by_label("When (cron expression)").fill("30 8 * * 1-5")
    preview = page.locator("#cron-preview")
    expect(preview.locator("li")).to_have_count(5)
    expect(preview.locator("li").first).to_contain_text("08:30 JST")
    page.get_by_label("When (cron expression)").fill("61 8 * * *")
    expect(preview).to_contain_text("Invalid cron expression")
    page.get_by_label("Goal", exact=True).fill("Update the release notes.")
    page.get_by_role("button", name="Save the schedule").click()

    # Refused: said above the form and next to the cron, which keeps what was typed.
    expect(page.locator("#schedule-error")).to_be_visible()
    cron_error = page.locator(".field:has(#id_cron) .errorlist").first
    expect(cron_error).to_contain_text("Invalid cron expression")
    expect(cron_error).to_be_visible()
    expect(page.get_by_label("When (cron expression)")).to_have_value("61 8 * * *")
    no_sideways_scroll(page)
    assert_accessible(page)
    screenshot(page, f"schedule-refused-{width}")

    page.get_by_label("When (cron expression)").fill("30 8 * * 1-5")
    page.get_by_role("button", name="Save the schedule").click()

    listing = page.locator("#schedule-list")
    expect(listing).to_contain_text("Update the release notes.")
    expect(listing).to_contain_text("Next:")
    expect(listing).to_contain_text("08:30 JST")
    no_sideways_scroll(page)
    assert_accessible(page)
    screenshot(page, f"schedules-{width}")

    page.get_by_role("button", name="Pause Update the release notes.").click()
    expect(page.locator("#schedule-list")).to_contain_text("paused")
    assert Schedule.objects.get().enabled is False

    page.get_by_role("link", name="Update the release notes.", exact=True).click()
    expect(page.get_by_text("It has not fired yet.")).to_be_visible()
    assert_accessible(page)

    page.goto(stack.url + "/schedules/")
    page.get_by_role("link", name="Delete… Update the release notes.").click()
    expect(page.get_by_role("heading", name="Delete the schedule")).to_be_visible()
    assert_accessible(page)
    page.get_by_role("button", name="Yes, delete it").click()
    expect(page.get_by_text("No schedule yet.")).to_be_visible()
    assert not Schedule.objects.exists()
    assert not page.csp_violations  # type: ignore[attr-defined]
