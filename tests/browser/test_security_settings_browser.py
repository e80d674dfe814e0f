"""On a phone (390 wide): the owner sees their sessions, adds an authenticator app (QR code,
confirmed by a code from it), makes new backup codes, and finds the notifications switch."""

from __future__ import annotations

import re

import pytest
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import Page, expect

from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def no_sideways_scroll(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_it_manages_sessions_authenticators_and_backup_codes_on_a_phone(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    backup = live_owner.credentials.backup_codes
    sign_in(page, stack, live_owner)
    page.goto(stack.url + "/settings/")

    sessions = page.locator("#sessions")
    expect(sessions).to_contain_text("this session")
    expect(sessions).to_contain_text("127.0.0.1")
    notifications = page.locator("#notifications")
    # Headless Chromium has the Push API: the switch is offered (no push service is reached).
    expect(notifications.get_by_role("button", name="Turn on notifications")).to_be_visible()
    no_sideways_scroll(page)

    card = page.locator("#authenticators")
    card.get_by_label("Name of the new authenticator").fill("new phone")
    card.get_by_label("Current code").fill(backup[0])
    card.get_by_role("button", name="Add an authenticator").click()
    expect(card.get_by_role("img", name="QR code for the authenticator app")).to_be_visible()
    no_sideways_scroll(page)
    screenshot(page, "settings-authenticator-qr")
    assert_accessible(page)
    new = TOTPDevice.objects.get(name="new phone")
    code = totp(new.bin_key, new.step, new.t0, new.digits, new.drift)
    card.get_by_label("Code from the new app").fill(f"{code:06d}")
    card.get_by_role("button", name="Confirm").click()

    expect(page.get_by_text("The new authenticator is added.")).to_be_visible()
    expect(card.get_by_role("button", name="Remove")).to_have_count(2)

    codes = page.locator("#backup-codes")
    codes.get_by_label("Current code").fill(backup[1])
    codes.get_by_role("button", name="Make new backup codes").click()
    shown = page.locator("#new-backup-codes code").all_inner_texts()
    assert len(shown) == 10
    assert all(re.fullmatch(r"\w+", code) for code in shown)
    no_sideways_scroll(page)
    screenshot(page, "settings-backup-codes")
    assert_accessible(page)
    assert not page.csp_violations  # type: ignore[attr-defined]
