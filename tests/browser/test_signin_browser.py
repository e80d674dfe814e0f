"""A phone signs in with password + TOTP and watches Home update live."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import async_to_sync
from channels_postgres.core import PostgresChannelLayer
from django.db import connection
from playwright.sync_api import Page, expect

from kernel import heartbeats
from kernel.bus import OWNER_GROUP
from tests.browser.conftest import screenshot
from tests.factories import Owner
from tests.live import Stack

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def sign_in(page: Page, stack: Stack, owner: Owner) -> None:
    page.goto(stack.url + "/")
    expect(page).to_have_url(f"{stack.url}/login/?next=%2F")
    page.get_by_label("Username").fill(owner.username)
    page.get_by_label("Password").fill(owner.password)
    page.get_by_label("Code").fill(owner.code())
    page.get_by_role("button", name="Sign in").click()


def test_it_signs_in_with_password_and_totp_and_shows_the_heartbeat(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    assert stack.wait_for_workers()["workers"]["state"] == "up", stack.log()
    page.goto(stack.url + "/")
    screenshot(page, "login")

    sign_in(page, stack, live_owner)

    expect(page).to_have_url(stack.url + "/")
    expect(page.get_by_role("heading", name="Home")).to_be_visible()
    expect(page.locator('[data-component="database"]')).to_have_text("up")
    expect(page.locator('[data-component="workers"]')).to_have_text("up")
    expect(page.locator("#last-beat time")).to_be_visible()
    expect(page.locator(".live-dot")).to_have_class("live-dot is-live")
    screenshot(page, "home")
    assert page.csp_violations == []  # type: ignore[attr-defined]


def test_it_refuses_the_password_alone_in_the_browser(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    page.goto(stack.url + "/login/")
    page.get_by_label("Username").fill(live_owner.username)
    page.get_by_label("Password").fill(live_owner.password)
    page.get_by_role("button", name="Sign in").click()

    expect(page.locator("#signin-error")).to_contain_text("Enter the code")
    screenshot(page, "login-refused")
    page.goto(stack.url + "/")
    expect(page).to_have_url(f"{stack.url}/login/?next=%2F")


def test_it_updates_home_live_when_the_doorbell_rings(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    stack.wait_for_workers()
    sign_in(page, stack, live_owner)
    expect(page.locator(".live-dot")).to_have_class("live-dot is-live")
    before = page.locator("#health").inner_text()
    assert "2 of " not in before  # the stack's one worker: "1 of 1 workers live"

    # A second worker appears; the change is announced over the real PostgreSQL channel layer,
    # from this process to daphne's, as a worker's heartbeat would.
    def announce() -> None:  # off the browser's thread, where an event loop is running
        heartbeats.record_beat(worker="browser-test:1")
        layer = PostgresChannelLayer(**{**connection.settings_dict, "TIME_ZONE": None})
        async_to_sync(layer.group_send)(OWNER_GROUP, {"type": "doorbell", "kind": "health"})
        connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(announce).result()

    expect(page.locator("#health")).to_contain_text(re.compile(r"2 of \d+ workers live"))
