"""Passkeys (WebAuthn credentials) as a second factor beside authenticator apps.

A passkey is a django-otp device (`django_otp_webauthn.WebAuthnCredential`): a session it
verified passes `is_verified` like one a TOTP code verified. The package gives the model and the
ceremonies over py_webauthn; the console runs them through its own views and script, so that
adding or removing one asks the second factor again and is audited like an authenticator app
(`security_settings`), and sign-in checks the password and the passkey in one step
(`agentos.signin.sign_in`).

Each ceremony is two requests: options (a fresh challenge kept in the session) and the answer
from the browser. The challenge is taken out of the session, and the session saved, before the
answer is checked: one challenge answers once, right or wrong.

The relying party is the host the console is reached by, and the origin that host with the
request's scheme; Django checked both against ALLOWED_HOSTS before any view ran. A passkey added
on one host name works only on that name. Browsers allow WebAuthn only in a secure context
(https, or http on localhost) and never on an IP address: reach the console as localhost.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import django_otp
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest
from django.http.request import split_domain_port
from django.utils import timezone
from django.utils.translation import gettext as _
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp_webauthn.exceptions import OTPWebAuthnApiError
from django_otp_webauthn.helpers import WebAuthnHelper
from django_otp_webauthn.models import WebAuthnCredential
from django_otp_webauthn.settings import app_settings
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import ResidentKeyRequirement, UserVerificationRequirement

from agentos.core import audit, security_settings
from agentos.core.models import AuditEvent
from agentos.core.security_settings import Refused

logger = logging.getLogger("agentos.core.passkeys")

# Session keys of the ceremonies in progress.
ENROLMENT = "agentos_passkey_enrolment"
SIGN_IN = "agentos_passkey_sign_in"
NAME_CHARS = 64
# A browser's answer is a few hundred bytes of base64url; anything this long is not one.
MAX_ANSWER_CHARS = 16_000
# What a malformed or forged answer raises, from the JSON parse to the signature check.
BAD_ANSWER = (WebAuthnException, OTPWebAuthnApiError, ValueError, TypeError, KeyError)


def relying_party_id(request: HttpRequest) -> str:
    # `get_host` raises on a host outside ALLOWED_HOSTS: nobody picks our relying party.
    domain, _port = split_domain_port(request.get_host())
    return domain


class Helper(WebAuthnHelper):  # type: ignore[misc]  # the package ships no type information
    """The package's ceremonies, with the origin taken from the request and passkeys that
    the browser finds by itself (the sign-in page names no account before the password)."""

    def get_allowed_origins(self) -> list[str]:
        request: HttpRequest = self.request
        return [f"{request.scheme}://{request.get_host()}"]

    def get_discoverable_credentials_preference(self) -> ResidentKeyRequirement:
        # Sign-in asks for "a passkey of this site", listing none: only a discoverable one answers.
        return ResidentKeyRequirement.REQUIRED

    def get_generate_authentication_options_kwargs(
        self, *, user: User | None = None, require_user_verification: bool
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_generate_authentication_options_kwargs(
            user=user, require_user_verification=require_user_verification
        )
        # The password is the knowledge factor; the passkey proves possession. Its own lock
        # (fingerprint, PIN) is asked for where the authenticator has one, never required.
        kwargs["user_verification"] = UserVerificationRequirement.PREFERRED
        return kwargs


def _helper(request: HttpRequest) -> Helper:
    return Helper(request=request)


def passkeys(user: User) -> list[WebAuthnCredential]:
    return list(WebAuthnCredential.objects.filter(user=user, confirmed=True).order_by("pk"))


def _keep(request: HttpRequest, key: str, state: dict[str, Any]) -> None:
    request.session[key] = {**state, "issued": timezone.now().timestamp()}


def _take(request: HttpRequest, key: str) -> dict[str, Any] | None:
    """The ceremony's state, once, and only within the time the browser was given to answer
    (py_webauthn does not look at the clock): a challenge never waits for a late answer."""
    state = request.session.pop(key, None)
    if state is None:
        return None
    # Saved now, before the answer is checked: a failed check must not leave it to retry.
    request.session.save()
    if not isinstance(state, dict) or not isinstance(state.get("issued"), float):
        return None
    age = timezone.now().timestamp() - state["issued"]
    return state if 0 <= age <= app_settings.OTP_WEBAUTHN_TIMEOUT_SECONDS else None


def _answer(answer: str) -> dict[str, Any]:
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        raise ValueError("no answer")
    data = json.loads(answer)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return data


# --- adding and removing ------------------------------------------------------------------------


def begin_enrolment(request: HttpRequest, *, user: User, name: str, code: str) -> dict[str, Any]:
    """The options for `navigator.credentials.create`, after the second factor again."""
    security_settings.confirm_code(request, user=user, code=code)
    name = " ".join(name.split())[:NAME_CHARS] or _("passkey")
    options, state = _helper(request).register_begin(user=user)
    _keep(request, ENROLMENT, {**state, "name": name, "user": user.pk})
    return dict(options)


def finish_enrolment(request: HttpRequest, *, user: User, answer: str) -> WebAuthnCredential:
    """Check the browser's answer to `begin_enrolment` and keep the new passkey."""
    state = _take(request, ENROLMENT)
    if state is None or state.get("user") != user.pk:
        raise Refused(
            _("No passkey is being added here. Start again from “Add a passkey”."),
            code="no_ceremony",
        )
    try:
        with transaction.atomic():
            device = _helper(request).register_complete(
                user=user, state=state, data=_answer(answer)
            )
            device.name = state["name"]
            device.confirmed = True
            device.save(update_fields=["name", "confirmed"])
            audit.record_request(
                AuditEvent.Kind.DEVICE_ADDED,
                request,
                username=user.get_username(),
                device=device.name,
                type="passkey",
            )
    except BAD_ANSWER as error:
        logger.info("passkey enrolment refused: %r", error)
        audit.record_request(
            AuditEvent.Kind.SECOND_FACTOR_REFUSED,
            request,
            username=user.get_username(),
            type="passkey",
        )
        raise Refused(
            _("The browser's answer could not be checked; the passkey was not added."),
            code="bad_answer",
        ) from None
    return device


def remove_passkey(request: HttpRequest, *, user: User, device_id: int, code: str) -> None:
    """Forget a passkey. An authenticator app always remains (the last one cannot be removed,
    `security_settings.remove_authenticator`), so removing every passkey locks nobody out."""
    with transaction.atomic():
        device = (
            WebAuthnCredential.objects.select_for_update().filter(user=user, pk=device_id).first()
        )
        if device is None:
            raise Refused(_("There is no such passkey."), code="not_found")
        verified = security_settings.confirm_code(request, user=user, code=code)
        was_this_sessions = request.session.get(DEVICE_ID_SESSION_KEY) == device.persistent_id
        name = device.name
        device.delete()
        audit.record_request(
            AuditEvent.Kind.DEVICE_REMOVED,
            request,
            username=user.get_username(),
            device=name,
            type="passkey",
        )
    if was_this_sessions:
        # This session was opened with the removed passkey: it stays open on the device that
        # just confirmed the change.
        django_otp.login(request, verified)


# --- signing in ---------------------------------------------------------------------------------


def begin_sign_in(request: HttpRequest) -> dict[str, Any]:
    """The options for `navigator.credentials.get`: a challenge, and no account named (which
    passkeys exist is not told to someone who has not given the password)."""
    options, state = _helper(request).authenticate_begin(user=None, require_user_verification=False)
    _keep(request, SIGN_IN, state)
    return dict(options)


def discard_sign_in(request: HttpRequest) -> None:
    _take(request, SIGN_IN)


def verify_sign_in(request: HttpRequest, *, user: User, answer: str) -> WebAuthnCredential | None:
    """The passkey of `user` that signed this session's challenge, else None (the caller
    audits and counts the failure like a wrong code)."""
    state = _take(request, SIGN_IN)
    if state is None:
        return None
    try:
        data = _answer(answer)
        device = _helper(request).authenticate_complete(user=user, state=state, data=data)
    except BAD_ANSWER as error:
        logger.info("passkey sign-in refused: %r", error)
        return None
    if not device.confirmed:
        return None
    return device
