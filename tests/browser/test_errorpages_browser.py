"""The console's 404 page in a real browser at phone size: inside the shell, no sideways scroll."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import screenshot
from tests.live import Stack


@pytest.mark.browser
def test_the_404_page_fits_a_phone(stack: Stack, page: Page) -> None:
    page.goto(f"{stack.url}/missions/999999/a-very-long-path-that-nobody-typed-on-purpose/")

    assert page.locator("h1").inner_text() == "This page does not exist"
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scroll
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != "rgba(0, 0, 0, 0)"
    screenshot(page, "error-404-phone")
