from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    ViewportSize,
    sync_playwright,
)

from tests.factories import Owner, make_owner
from tests.live import KeptStack, Stack

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ARTIFACTS = ROOT / ".artifacts" / "screenshots"
# axe-core, pinned in package-lock.json and installed by `make test` (npm ci).
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = frozenset({"serious", "critical"})
PHONE: ViewportSize = {"width": 390, "height": 844}
# As root in a container Chromium needs --no-sandbox; the network flags keep it from calling home
# (this machine has no network, and each refused call slows the start).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Chromium is not installed: `apt-get install chromium` (.ci/run does it).")
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The browser tests on the kept stack first, in their order, then the others (a stack of
    their own, or none): the kept stack starts once, not again after each of the others."""
    here = [index for index, item in enumerate(items) if item.path.is_relative_to(HERE)]
    ordered = sorted(
        (items[index] for index in here),
        key=lambda item: "stack" not in getattr(item, "fixturenames", ()),
    )
    for index, item in zip(here, ordered, strict=True):
        items[index] = item


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the browser tests, gone (with its event loop) before other packages'
    tests use the ORM; each test gets a context of its own (`page`), cookies and service
    workers included.

    Playwright's sync API keeps an event loop running in this thread; Django then refuses
    synchronous ORM calls (tests' own, and the flush after each test), though none of them run
    inside a coroutine. The permission lasts exactly as long as the loop.
    """
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield from _launch()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


def _launch() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    violations: list[str] = []

    def watch(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            violations.append(message.text)

    page.on("console", watch)
    page.csp_violations = violations  # type: ignore[attr-defined]  # read by the tests
    yield page
    context.close()


@pytest.fixture
def live_owner(transactional_db: None) -> Owner:
    # The stack runs the product settings, which do not know the tests' fast password hasher.
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.PBKDF2PasswordHasher"]):
        return make_owner()


@pytest.fixture(scope="package")
def kept_stack(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KeptStack]:
    """The stack the browser tests share (`KeptStack`): a test that needs one of its own (another
    environment, the demo) starts it with `running_stack`, which stops this one first."""
    kept = KeptStack(lambda: tmp_path_factory.mktemp("browser-stack"))
    yield kept
    kept.close()


@pytest.fixture(autouse=True)
def _only_my_stack(request: pytest.FixtureRequest, kept_stack: KeptStack) -> None:
    """A test without `stack` may start its own and its runs before it (the crash plan's run):
    the kept stack's workers, idle on the same database, must not claim them first."""
    if "stack" not in request.fixturenames:
        kept_stack.close()


@pytest.fixture
def stack(live_owner: Owner, kept_stack: KeptStack) -> Stack:
    return kept_stack.get()


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


@functools.cache
def _axe_source() -> str:
    return AXE.read_text()


def axe_violations(page: Page) -> list[str]:
    """Run axe-core on the page as it is now: its serious and critical violations, each with its
    rule, impact, what to do and the elements (CSS selectors), in words."""
    if not AXE.exists():
        pytest.fail("axe-core is not installed: run `npm ci` (`make test` does it).")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        # Evaluated over the browser's debugging protocol, which the console's CSP (script-src
        # 'self') does not govern, so the CSP watcher stays meaningful; not a <script src> that
        # Playwright answers: once the console's service worker controls the page, such a fetch
        # can pass Playwright's route by and reach the server (a 404).
        page.evaluate(_axe_source())
    results: dict[str, Any] = page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']})"
    )
    found = []
    for violation in results["violations"]:
        if violation["impact"] not in BLOCKING:
            continue
        found.append(f"{violation['id']} ({violation['impact']}): {violation['help']}")
        for node in violation["nodes"]:
            summary = " ".join(node["failureSummary"].split())
            found.append(f"    {' '.join(map(str, node['target']))}: {summary}")
    return found


def assert_accessible(page: Page) -> None:
    """Fail on any serious or critical axe-core violation of the page as it is now."""
    found = axe_violations(page)
    if found:
        pytest.fail("\n".join([f"axe-core on {page.url}:", *found]), pytrace=False)
