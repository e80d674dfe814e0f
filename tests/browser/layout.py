"""What every screen of a browser test must do at its width, whatever is on it."""

from __future__ import annotations

from playwright.sync_api import Page


def no_sideways_scroll(page: Page) -> None:
    width = page.viewport_size["width"] if page.viewport_size else 0
    assert page.evaluate("document.documentElement.scrollWidth") <= width
