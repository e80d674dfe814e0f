"""Passkeys in a browser test: Chromium's virtual authenticator (the DevTools protocol's WebAuthn
domain) answering in place of a screen lock or security key, and the console's URL by name."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import CDPSession, Page

from tests.live import Stack


def virtual_authenticator(page: Page) -> tuple[CDPSession, str]:
    """A platform authenticator that keeps discoverable credentials and verifies its user (a
    fingerprint that always matches), answering without a prompt."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    added: dict[str, Any] = cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return cdp, added["authenticatorId"]


def console_url(stack: Stack) -> str:
    # Browsers refuse WebAuthn on an IP address: the console is reached as localhost.
    return stack.url.replace("127.0.0.1", "localhost")
