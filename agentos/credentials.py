"""Printing the owner's new credentials on a terminal, once."""

from __future__ import annotations

import io

import segno

from agentos.core.owner import OwnerCredentials


def render(credentials: OwnerCredentials, *, url: str) -> str:
    qr = io.StringIO()
    segno.make(credentials.totp_uri, error="m").terminal(out=qr, compact=True)
    codes = "  ".join(credentials.backup_codes)
    return "\n".join(
        [
            "",
            "=" * 72,
            "  agentos owner account created. This is shown ONCE: keep it now.",
            "=" * 72,
            f"  Sign in at   {url}/login/",
            f"  Username     {credentials.username}",
            f"  Password     {credentials.password}",
            "",
            "  Second factor: scan this QR code with an authenticator app",
            "  (or enter the URI below by hand):",
            qr.getvalue(),
            f"  {credentials.totp_uri}",
            "",
            "  Backup codes (each works once, instead of an app code):",
            f"  {codes}",
            "",
            "  Lost them? `.venv/bin/python manage.py reset_owner` issues new ones.",
            "=" * 72,
            "",
        ]
    )
