"""On a phone (390 wide): the owner points agentos at a local model server from Settings, tests
it, and never sees the key again."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from missions import endpoints
from tests.browser.conftest import screenshot
from tests.browser.test_signin_browser import sign_in
from tests.factories import Owner
from tests.live import Stack
from tests.providers.compatible_wire import Chat
from tests.providers.wire import wire_server

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEY = "local-secret-key-5e1d"


def test_it_sets_up_and_tests_a_local_model_on_a_phone(
    page: Page, stack: Stack, live_owner: Owner
) -> None:
    sign_in(page, stack, live_owner)
    page.goto(stack.url + "/settings/")
    card = page.locator("#provider-compatible")
    with wire_server() as server:
        card.get_by_label("Base URL").fill(server.url + "/v1")
        card.get_by_label("Model", exact=True).fill("qwen2.5-coder:7b")
        card.get_by_label("API key").fill(KEY)
        card.get_by_role("button", name="Save endpoint").click()

        expect(page.get_by_text("The compatible endpoint is saved.")).to_be_visible()
        expect(card).to_contain_text("ready")
        assert KEY not in page.content()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll

        server.queue(Chat().text("OK").finish())
        card.get_by_role("button", name="Test").click()

        expect(page.locator("#trial-compatible")).to_contain_text("Test passed.")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        screenshot(page, "settings-compatible-tested")
    assert endpoints.get() == endpoints.Endpoint(server.url + "/v1", "qwen2.5-coder:7b")
    # The stack keeps its own vault: the key it sent is the proof that it stored it.
    sent = {name.lower(): value for name, value in server.received[0].headers.items()}
    assert sent["authorization"] == f"Bearer {KEY}"
    assert KEY not in page.content()
    assert not page.csp_violations  # type: ignore[attr-defined]
