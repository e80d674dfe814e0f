"""On a phone (390 wide): a mission ends in the real stack; its worker derives the notification
and posts it, encrypted, to the device's push service; the console's service worker shows it,
and it opens the mission. The Home screen lists it until dismissed; Settings chooses per kind.

The push service's leg is played here: headless Chromium refuses `pushManager.subscribe` (and
this machine has no network to reach its push service), so the test holds the subscription's
keys, receives the post on a local push service, decrypts it as the phone's push service client
would, and hands the payload to the console's registered service worker through DevTools
(`ServiceWorker.deliverPushMessage`), which is what the browser does with a push it receives."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from kernel import runs
from tests.approvals.factories import make_mission
from tests.approvals.test_push import Browser, PushService, service
from tests.browser.conftest import PHONE, assert_accessible, screenshot
from tests.browser.layout import no_sideways_scroll
from tests.browser.pushes import device, registration_id, shown
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tests.polling import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["device", "service"]  # fixtures: the local push service, the phone subscribed

DESKTOP: ViewportSize = {"width": 1280, "height": 800}


def test_a_missions_end_reaches_the_phone_opens_the_mission_and_is_chosen_in_settings(
    page: Page, stack: Stack, live_owner: Owner, service: PushService, device: Browser
) -> None:
    page.context.grant_permissions(["notifications"], origin=stack.url)
    stack.wait_for_workers()
    sign_in(page, stack, live_owner)
    expect(page.locator("#told")).to_contain_text("Nothing new to tell you.")
    session, registration = registration_id(page)

    mission = make_mission("Publish the 1.3 release notes")
    runs.start_run(account=mission, program="chaos.noop", input={"steps": 1})
    received = wait_for(
        lambda: service.received[:1], timeout=60, message="the mission's end to be pushed"
    )[0]
    payload = device.read(received)
    assert payload["url"] == f"/missions/{mission.pk}/"

    session.send(
        "ServiceWorker.deliverPushMessage",
        {"origin": stack.url, "registrationId": registration, "data": json.dumps(payload)},
    )
    (notification,) = wait_for(lambda: shown(page), timeout=30, message="the notification")
    assert notification["title"] == "Mission done"
    assert notification["body"] == "Publish the 1.3 release notes"
    assert notification["url"] == f"/missions/{mission.pk}/"  # what a tap opens

    page.goto(stack.url + notification["url"])
    expect(page.locator("h1")).to_contain_text(f"Mission {mission.pk}")
    expect(page.get_by_text("Publish the 1.3 release notes").first).to_be_visible()

    # Home lists it until dismissed.
    page.goto(stack.url + "/")
    told = page.locator("#told")
    expect(told).to_contain_text("Mission done")
    no_sideways_scroll(page)
    screenshot(page, "home-told-you")
    assert_accessible(page)
    page.set_viewport_size(DESKTOP)
    assert_accessible(page)
    told.get_by_role("link", name="Mission done").click()
    expect(page).to_have_url(f"{stack.url}/missions/{mission.pk}/")
    page.go_back()
    told.get_by_role("button", name="Dismiss: Mission done").click()
    expect(told).to_contain_text("Nothing new to tell you.")

    # Settings: a kind kept for the daily digest, at the owner's hour in their zone.
    page.set_viewport_size(PHONE)
    page.goto(stack.url + "/settings/#told-settings")
    card = page.locator("#told-settings")
    card.get_by_label("A mission is done").select_option("digest")
    card.get_by_label("Your time zone").fill("Europe/Paris")
    card.get_by_role("button", name="Save choices").click()
    expect(page.get_by_text("Your notification choices are saved.")).to_be_visible()
    expect(card.get_by_label("A mission is done")).to_have_value("digest")
    no_sideways_scroll(page)
    screenshot(page, "settings-told-you")
    assert_accessible(page)
    page.set_viewport_size(DESKTOP)
    assert_accessible(page)
    assert not page.csp_violations  # type: ignore[attr-defined]
