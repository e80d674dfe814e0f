"""Owner sign-in: password and a mandatory second factor, with growing delays after failures.

One entry point, `sign_in`, used by the login page. A password alone never opens a session: the
code (TOTP, or a one-time backup code) or a passkey's answer (`agentos.core.passkeys`) is checked
in the same step, and every outcome is audited.

Failures are counted per (client address, username) and per client address, in the database
(`SignInThrottle`: shared by every process, kept across restarts). Past a few free failures,
each one refuses the next attempt from there for twice as long as the last (1 s, 2 s, 4 s, …,
at most `SIGNIN_MAX_DELAY_SECONDS`). Nothing is counted per username alone: an attacker on
another address can slow only themselves, never lock the owner out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import django_otp
from django.conf import settings
from django.contrib.auth import authenticate, login
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django_otp.models import Device

from agentos.core import audit, passkeys, security_settings
from agentos.core.models import AuditEvent, SignInThrottle


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


def sign_in(
    request: HttpRequest, *, username: str, password: str, code: str, passkey: str = ""
) -> SignedIn:
    """Open a verified owner session, or raise `SignInRefused`.

    1. Refuse at once, checking nothing, while this address (or this address for this
       username) must wait.
    2. Check the password and then the code, or the passkey's answer when there is one; a
       failure of either is audited, counted, and answered with one message (which of them was
       wrong is never said).
    3. Log in, bind the verifying device to the session (django-otp marks it verified), and
       clear this address's counts.
    """
    address = audit.client_address(request) or ""
    name = _name(username)
    wait = _seconds_to_wait(address=address, username=name)
    if wait:
        audit.record_request(AuditEvent.Kind.SIGNIN_THROTTLED, request, username=username)
        # This says only how many failures came from here lately, which the client knows: it
        # is decided before the password is looked at, the same for a right and a wrong one.
        seconds = math.ceil(wait)
        raise SignInRefused(
            ngettext(
                "Too many attempts; try again in %(seconds)d second.",
                "Too many attempts; try again in %(seconds)d seconds.",
                seconds,
            )
            % {"seconds": seconds},
            status=429,
            reason="throttled",
        )
    code = "".join(code.split())
    if not code and not passkey:
        # Said before anything is checked, so it tells nothing about the password; not counted.
        _audit_failure(request, username, "missing_second_factor")
        raise SignInRefused(
            _("Enter the code from your authenticator app, or one of your backup codes."),
            status=400,
            reason="missing_second_factor",
        )

    user = authenticate(request, username=username, password=password)
    device = _second_factor(request, user, code=code, passkey=passkey)
    if user is None or device is None:
        reason = "bad_password" if user is None else "bad_passkey" if passkey else "bad_code"
        _audit_failure(request, username, reason)
        failures = _count_failure(address=address, username=name)
        # One text and one status for a wrong user, password or code: a right password with a
        # wrong code must not be told apart (the audit log, the owner's only, keeps which). So
        # the wait it names comes from the failures from here, never from the owner's devices.
        seconds = max(
            math.ceil(_seconds_to_wait(address=address, username=name)), _code_pause(failures)
        )
        if not seconds:
            raise SignInRefused(
                _("Sign-in failed: check your username, password and code."),
                status=401,
                reason=reason,
            )
        raise SignInRefused(
            ngettext(
                "Sign-in failed: check your username, password and code. Wait %(seconds)d"
                " second before you try again: a code sent sooner is refused, even a right one.",
                "Sign-in failed: check your username, password and code. Wait %(seconds)d"
                " seconds before you try again: a code sent sooner is refused, even a right one.",
                seconds,
            )
            % {"seconds": seconds},
            status=401,
            reason=reason,
        )

    login(request, user)
    django_otp.login(request, device)
    security_settings.note_sign_in(request)
    audit.record_request(
        AuditEvent.Kind.SIGNIN_SUCCEEDED, request, username=username, device=device.persistent_id
    )
    # The owner proved who they are from here: their own mistakes stop counting against them.
    SignInThrottle.objects.filter(address=address, username__in=["", name]).delete()
    return SignedIn(user=user, device=device)


def _second_factor(
    request: HttpRequest, user: AbstractBaseUser | None, *, code: str, passkey: str
) -> Device | None:
    if passkey:
        # The challenge is spent even after a wrong password: each try asks the passkey anew.
        challenge_user = user if isinstance(user, User) else None
        if challenge_user is None:
            passkeys.discard_sign_in(request)
            return None
        return passkeys.verify_sign_in(request, user=challenge_user, answer=passkey)
    return django_otp.match_token(user, code) if user is not None else None


def _name(username: str) -> str:
    # Case and spaces must not give an attacker a fresh count for the same account.
    return username.strip().lower()[:150]


def _audit_failure(request: HttpRequest, username: str, reason: str) -> None:
    audit.record_request(AuditEvent.Kind.SIGNIN_FAILED, request, username=username, reason=reason)


def _seconds_to_wait(*, address: str, username: str) -> float:
    now = timezone.now()
    blocked = SignInThrottle.objects.filter(
        Q(username="") | Q(username=username),
        address=address,
        blocked_until__gt=now,
        last_failure_at__gt=now - timedelta(seconds=settings.SIGNIN_FORGET_SECONDS),
    ).values_list("blocked_until", flat=True)
    return max(((until - now).total_seconds() for until in blocked if until), default=0.0)


def _code_pause(failures: int) -> int:
    """How long a device refuses even a right code after `failures` wrong ones in a row: django-otp
    holds each device back 2^(n-1) times its throttle factor seconds after its n-th. Counted here
    from the failures of this address and username (wrong passwords too, which never reach a
    device), so the pause named is never shorter than the device's."""
    factor = max(
        int(getattr(settings, "OTP_TOTP_THROTTLE_FACTOR", 1)),
        int(getattr(settings, "OTP_STATIC_THROTTLE_FACTOR", 1)),
    )
    if failures < 1 or factor < 1:
        return 0
    return int(min(factor * 2 ** min(failures - 1, 30), settings.SIGNIN_MAX_DELAY_SECONDS))


def _count_failure(*, address: str, username: str) -> int:
    """One more failure for the address and for the (address, username) pair; past the free
    ones, the next attempt waits 2^(failures - free) seconds, capped. The pair's failures, this
    one included."""
    now = timezone.now()
    forget = now - timedelta(seconds=settings.SIGNIN_FORGET_SECONDS)
    counts = [
        (username, settings.SIGNIN_MAX_FAILURES),
        ("", settings.SIGNIN_MAX_FAILURES_PER_ADDRESS),
    ]
    pair = 0
    with transaction.atomic():
        SignInThrottle.objects.filter(last_failure_at__lte=forget).delete()
        for name, free in counts:
            row, _created = SignInThrottle.objects.select_for_update().get_or_create(
                address=address, username=name, defaults={"last_failure_at": now}
            )
            row.failures += 1
            row.last_failure_at = now
            row.blocked_until = _blocked_until(now, failures=row.failures, free=free)
            row.save(update_fields=["failures", "last_failure_at", "blocked_until"])
            if name == username:
                pair = row.failures
    return pair


def _blocked_until(now: datetime, *, failures: int, free: int) -> datetime | None:
    if failures < free:
        return None
    # Capped before the power is taken: a long campaign must not overflow the exponent.
    exponent = min(failures - free, 30)
    return now + timedelta(seconds=min(2**exponent, settings.SIGNIN_MAX_DELAY_SECONDS))
