"""The phone's leg of a Web Push, played by a browser test: the subscription the server keeps
(`device`), the console's service worker registration as DevTools names it, and the
notifications that service worker shows.

Headless Chromium refuses `pushManager.subscribe` (and this machine has no network to reach its
push service), so a test holds the subscription's keys, receives the post on a local push
service (`tests.approvals.test_push.service`), decrypts it, and hands the payload to the
console's registered service worker through DevTools (`ServiceWorker.deliverPushMessage`)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from playwright.sync_api import CDPSession, Page
from pytest_django.fixtures import Settings

from approvals import push
from tests.approvals.test_push import Browser, PushService
from tests.factories import Owner
from tests.polling import wait_for


@pytest.fixture
def device(service: PushService, settings: Settings, live_owner: Owner) -> Browser:
    """The phone's subscription, kept by the server as the console's subscribe call keeps it."""
    settings.PUSH_ALLOW_LOOPBACK = True
    phone = Browser(
        f"{service.url}/push/phone", ec.generate_private_key(ec.SECP256R1()), os.urandom(16)
    )
    push.subscribe(
        subscription=phone.subscription(),
        agent="Chromium on a phone",
        username=live_owner.username,
        address=None,
    )
    return phone


def registration_id(page: Page) -> tuple[CDPSession, str]:
    """The console's service worker registration, as DevTools names it."""
    page.evaluate("() => navigator.serviceWorker.ready.then(() => true)")
    session = page.context.new_cdp_session(page)
    found: list[dict[str, Any]] = []
    session.on(
        "ServiceWorker.workerRegistrationUpdated", lambda e: found.extend(e["registrations"])
    )
    session.send("ServiceWorker.enable")

    def registered() -> list[dict[str, Any]]:
        page.wait_for_timeout(50)  # DevTools' events come in on Playwright's loop
        return found

    wait_for(
        registered,
        timeout=10,
        message="the service worker's registration",
        interval=0.05,
    )
    live = [r for r in found if not r["isDeleted"]]
    return session, str(live[0]["registrationId"])


def shown(page: Page) -> list[dict[str, Any]]:
    """The notifications the console's service worker shows now."""
    return page.evaluate(  # type: ignore[no-any-return]
        """async () => {
            const reg = await navigator.serviceWorker.ready;
            return (await reg.getNotifications()).map(
                (n) => ({title: n.title, body: n.body, tag: n.tag, url: n.data && n.data.url}));
        }"""
    )
