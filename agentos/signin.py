"""Owner sign-in: password and a mandatory second factor, with a limiter on failures.

One entry point, `sign_in`, used by the login page. A password alone never opens a session: the
code (TOTP, or a one-time backup code) is checked in the same step, and every outcome is audited.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

import django_otp
from django.conf import settings
from django.contrib.auth import authenticate, login
from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _
from django_otp.models import Device

from agentos import audit
from agentos.models import AuditEvent


class SignInRefused(Exception):
    """A refused sign-in; `message` is safe to show, `status` is the HTTP status to answer."""

    def __init__(self, message: str, *, status: int, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class SignedIn:
    user: AbstractBaseUser
    device: Device


def sign_in(request: HttpRequest, *, username: str, password: str, code: str) -> SignedIn:
    """Open a verified owner session, or raise `SignInRefused`.

    1. Refuse at once while too many recent failures name this user or come from this address.
    2. Check the password and then the code; a failure of either is audited and counted.
    3. Log in and bind the verifying device to the session (django-otp marks it verified).
    """
    address = audit.client_address(request)
    wait = _seconds_until_allowed(username=username, address=address)
    if wait:
        minutes = max(1, math.ceil(wait / 60))
        audit.record_request(AuditEvent.Kind.SIGNIN_THROTTLED, request, username=username)
        raise SignInRefused(
            _("Too many failed sign-in attempts. Try again in %(minutes)d minute(s).")
            % {"minutes": minutes},
            status=429,
            reason="throttled",
        )
    code = "".join(code.split())
    if not code:
        _fail(request, username, "missing_second_factor")
        raise SignInRefused(
            _("Enter the code from your authenticator app, or one of your backup codes."),
            status=400,
            reason="missing_second_factor",
        )

    user = authenticate(request, username=username, password=password)
    if user is None:
        _fail(request, username, "bad_password")
        raise SignInRefused(_("Wrong username or password."), status=401, reason="bad_password")

    device = django_otp.match_token(user, code)
    if device is None:
        _fail(request, username, "bad_code")
        raise SignInRefused(
            _("Wrong code, or a code that was already used. Wait for the next code and retry."),
            status=401,
            reason="bad_code",
        )

    login(request, user)
    django_otp.login(request, device)
    audit.record_request(
        AuditEvent.Kind.SIGNIN_SUCCEEDED, request, username=username, device=device.persistent_id
    )
    return SignedIn(user=user, device=device)


def _fail(request: HttpRequest, username: str, reason: str) -> None:
    audit.record_request(AuditEvent.Kind.SIGNIN_FAILED, request, username=username, reason=reason)


def _seconds_until_allowed(*, username: str, address: str | None) -> float:
    """Seconds until the oldest counted failure leaves the window, or 0 when not throttled."""
    window = timedelta(seconds=settings.SIGNIN_WINDOW_SECONDS)
    since = timezone.now() - window
    # A form sent without its code proves nothing about the password: it is not counted.
    failures = AuditEvent.objects.filter(kind=AuditEvent.Kind.SIGNIN_FAILED, at__gte=since).exclude(
        detail__reason="missing_second_factor"
    )
    limits = [(failures.filter(username=username), settings.SIGNIN_MAX_FAILURES_PER_USER)]
    if address:
        limits.append((failures.filter(address=address), settings.SIGNIN_MAX_FAILURES_PER_ADDRESS))
    wait = 0.0
    for rows, limit in limits:
        recent = list(rows.order_by("-at").values_list("at", flat=True)[:limit])
        if len(recent) >= limit:
            # Allowed again when the limit-th most recent failure falls out of the window.
            freed_at = recent[-1] + window
            wait = max(wait, (freed_at - timezone.now()).total_seconds())
    return wait
