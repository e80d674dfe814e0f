"""The Webhooks screen on a phone (390 wide) and a laptop (1280 wide), against the real stack:
the owner creates an endpoint (its URL and secret shown once, with copy buttons), a signed
delivery that could not start its mission is listed as failed with why, the Replay button
starts it once a model is set, and the endpoint is deleted after a confirmation."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from missions import endpoints
from missions.models import Mission, Project, RoleRoute, Webhook, WebhookDelivery
from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.layout import no_sideways_scroll
from tests.browser.test_signin_browser import sign_in
from tests.browser.webhooks import deliver, wire
from tests.factories import Owner
from tests.live import Stack
from tests.providers.compatible_wire import MODEL, Chat
from tests.providers.wire import WireServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["wire"]  # a fixture: the local model server

LAPTOP = {"width": 1280, "height": 800}


def test_it_creates_lists_replays_and_deletes_webhooks(
    page: Page, stack: Stack, live_owner: Owner, wire: WireServer
) -> None:
    Project.objects.create(name="site")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
    sign_in(page, stack, live_owner)
    page.goto(stack.url + "/more/")
    page.get_by_role("link", name="Webhooks").click()
    expect(page.get_by_role("heading", name="Webhooks", exact=True)).to_be_visible()
    expect(page.get_by_text("No webhook yet.")).to_be_visible()
    no_sideways_scroll(page)
    assert_accessible(page)

    page.get_by_label("Name").fill("deploys")
    page.get_by_label("Goal").fill("Check the deployment that was reported.")
    page.get_by_label("Risk class").select_option("research")
    page.get_by_role("button", name="Create the webhook").click()

    created = page.locator("#webhook-created")
    expect(created).to_contain_text("will not be shown again")
    secret = page.locator("#webhook-secret").inner_text().strip()
    url = page.locator("#webhook-url").inner_text().strip()
    assert secret.startswith("whsec_")
    assert url.startswith(stack.url + "/hooks/")
    page.get_by_role("button", name="Copy the secret").click()
    expect(created.get_by_role("status")).to_have_text("Secret copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    no_sideways_scroll(page)
    screenshot(page, "webhooks-created")
    assert_accessible(page)

    # No model is routed yet (the flushed database has no routes): stored as failed, the
    # sender told 503.
    failed = deliver(url, secret, json.dumps({"version": "1.4"}).encode(), "deploy-1")
    assert failed.status_code == 503, failed.text
    page.goto(stack.url + "/webhooks/")
    assert secret not in page.content()  # shown once
    expect(page.get_by_text("1 failed")).to_be_visible()
    page.get_by_role("link", name="deploys").click()
    deliveries = page.locator("#deliveries")
    expect(deliveries).to_contain_text("Failed")
    stored = WebhookDelivery.objects.get()
    assert (stored.status, stored.mission_id) == ("failed", None)
    expect(deliveries).to_contain_text(stored.error)
    no_sideways_scroll(page)
    screenshot(page, "webhook-failed-delivery")
    assert_accessible(page)

    # The cause fixed (a model set), Replay starts the mission.
    wire.queue(Chat().text("Checked.").finish())
    endpoints.put(base_url=wire.url + "/v1", model=MODEL)
    RoleRoute.objects.update_or_create(
        role="executor", defaults={"provider": "compatible", "model": MODEL, "effort": ""}
    )
    deliveries.get_by_role("button", name="Replay the delivery deploy-1").click()
    expect(deliveries).to_contain_text("Accepted")
    mission = Mission.objects.get()
    expect(deliveries.get_by_role("link", name=f"Mission {mission.pk}")).to_be_visible()
    assert WebhookDelivery.objects.get().mission_id == mission.pk

    page.set_viewport_size(LAPTOP)  # type: ignore[arg-type]  # a ViewportSize dict
    no_sideways_scroll(page)
    screenshot(page, "webhook-laptop")
    assert_accessible(page)

    page.get_by_role("link", name="Delete…").click()
    expect(page.get_by_role("heading", name="Delete this webhook?")).to_be_visible()
    assert_accessible(page)
    page.get_by_role("button", name="Yes, delete deploys").click()
    expect(page.get_by_text("No webhook yet.")).to_be_visible()
    assert not Webhook.objects.exists()
    assert Mission.objects.count() == 1
    assert not page.csp_violations  # type: ignore[attr-defined]
