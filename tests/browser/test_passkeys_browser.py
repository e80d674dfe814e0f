"""A passkey signs in: the owner adds one in Settings, signs out, signs in with the password and
the passkey, then removes it; on a phone and on a laptop, with Chromium's virtual authenticator
(the DevTools protocol's WebAuthn domain) answering in place of a screen lock or security key."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from tests.browser.conftest import PHONE, assert_accessible, screenshot
from tests.browser.layout import no_sideways_scroll
from tests.browser.passkeys import console_url, virtual_authenticator
from tests.factories import Owner
from tests.live import Stack

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LAPTOP: ViewportSize = {"width": 1280, "height": 800}


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_a_passkey_signs_in(
    page: Page, stack: Stack, live_owner: Owner, viewport: ViewportSize
) -> None:
    page.set_viewport_size(viewport)
    cdp, authenticator = virtual_authenticator(page)
    url = console_url(stack)
    backup = live_owner.credentials.backup_codes

    page.goto(stack.url + "/login/")  # by address: the button would only fail, so none
    expect(page.get_by_label("Code")).to_be_visible()
    expect(page.get_by_role("button", name="Use a passkey")).to_be_hidden()

    page.goto(url + "/login/")
    expect(page.get_by_role("button", name="Use a passkey")).to_be_visible()
    page.get_by_label("Username").fill(live_owner.username)
    page.get_by_label("Password").fill(live_owner.password)
    page.get_by_label("Code").fill(live_owner.code())
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Home")).to_be_visible()

    page.goto(url + "/settings/#passkeys")
    card = page.locator("#passkeys")
    expect(card).to_contain_text("No passkey yet.")
    card.get_by_label("Name of the new passkey").fill("this laptop")
    card.get_by_label("Current code").fill(backup[0])
    card.get_by_role("button", name="Add a passkey").click()
    expect(page.get_by_text("The passkey “this laptop” is added.")).to_be_visible()
    expect(card.get_by_role("button", name="Remove “this laptop”")).to_be_visible()
    stored = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})
    assert [c["isResidentCredential"] for c in stored["credentials"]] == [True]
    no_sideways_scroll(page)
    screenshot(page, f"settings-passkeys-{viewport['width']}")
    assert_accessible(page)

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    passkey = page.get_by_role("button", name="Use a passkey")
    passkey.click()  # before the password: said, and nothing asked of the authenticator
    expect(page.locator("#passkey-error")).to_contain_text("Enter your username and password")
    assert_accessible(page)
    page.get_by_label("Username").fill(live_owner.username)
    page.get_by_label("Password").fill(live_owner.password)
    screenshot(page, f"login-passkey-{viewport['width']}")
    passkey.click()
    expect(page.get_by_role("heading", name="Home")).to_be_visible()

    page.goto(url + "/settings/#passkeys")
    card = page.locator("#passkeys")
    expect(card).to_contain_text("last used")
    card.get_by_label("Current code").first.fill(backup[1])
    card.get_by_role("button", name="Remove “this laptop”").click()
    expect(page.get_by_text("The passkey is removed.")).to_be_visible()
    expect(card).to_contain_text("No passkey yet.")
    assert_accessible(page)
    assert page.csp_violations == []  # type: ignore[attr-defined]
