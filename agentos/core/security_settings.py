"""The owner's sessions and second-factor devices, as Settings shows and changes them.

Every change asks the second factor again (`confirm_code`: a code from an authenticator app, or
an unused backup code) and is audited. Removing an authenticator is refused while it is the
last confirmed one: the owner must never be locked out (`manage.py reset_owner` is the way back
from a lost phone, not a way in after a slip on this page).

Sessions are Django's database sessions; what a session cannot tell by itself (when it began,
from where, when it was last used) is noted in it at sign-in (`note_sign_in`) and while it is
used (`note_seen`). A session from before those notes shows them as unknown.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime, timedelta

import django_otp
import segno
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from agentos.core import audit
from agentos.core.errors import DomainError
from agentos.core.models import AuditEvent
from agentos.core.owner import BACKUP_CODES

# Session keys of our notes (prefixed: the session also holds Django's and django-otp's).
STARTED = "agentos_started_at"
SEEN = "agentos_seen_at"
ADDRESS = "agentos_address"
AGENT = "agentos_agent"
# "Last seen" is rewritten at most this often: each rewrite is a session save.
SEEN_EVERY = timedelta(minutes=1)
AGENT_CHARS = 200


class Refused(DomainError):
    """A change refused: a wrong code, the last authenticator, an unknown device."""


# --- sessions -----------------------------------------------------------------------------------


def note_sign_in(request: HttpRequest) -> None:
    now = timezone.now().isoformat()
    request.session[STARTED] = now
    request.session[SEEN] = now
    request.session[ADDRESS] = audit.client_address(request) or ""
    request.session[AGENT] = request.headers.get("User-Agent", "")[:AGENT_CHARS]


def note_seen(request: HttpRequest) -> None:
    """Note a page the owner opened. Live refreshes (htmx) are not the owner's doing and are
    the hot path: they never write the session."""
    if request.headers.get("HX-Request") == "true":
        return
    seen = parse_datetime(str(request.session.get(SEEN, "")))
    now = timezone.now()
    if seen is None or now - seen >= SEEN_EVERY:
        request.session[SEEN] = now.isoformat()


@dataclass(frozen=True)
class SessionInfo:
    key_hint: str  # never the session key itself: a key in a page is a session to steal
    started_at: datetime | None
    seen_at: datetime | None
    expires_at: datetime
    address: str
    agent: str
    current: bool


def sessions_of(user: User, *, current_key: str | None) -> list[SessionInfo]:
    """The user's unexpired sessions, this one first, then the most recently used."""
    found = []
    for session, data in _sessions(user):
        found.append(
            SessionInfo(
                key_hint=session.session_key[-4:],
                started_at=_when(data.get(STARTED)),
                seen_at=_when(data.get(SEEN)),
                expires_at=session.expire_date,
                address=str(data.get(ADDRESS, "")),
                agent=str(data.get(AGENT, "")),
                current=session.session_key == current_key,
            )
        )
    epoch = datetime.min.replace(tzinfo=timezone.get_current_timezone())
    return sorted(found, key=lambda s: (not s.current, -(s.seen_at or epoch).timestamp()))


def sign_out_others(request: HttpRequest, *, user: User) -> int:
    """End every session of `user` but this one; how many ended."""
    current = request.session.session_key
    keys = [s.session_key for s, _ in _sessions(user) if s.session_key != current]
    ended, _ = Session.objects.filter(session_key__in=keys).delete()
    audit.record_request(
        AuditEvent.Kind.SESSIONS_ENDED, request, username=user.get_username(), ended=ended
    )
    return ended


def _sessions(user: User) -> list[tuple[Session, dict[str, object]]]:
    # Sessions are not indexed by user: decoding each is fine for one owner's handful.
    found = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()):
        data = session.get_decoded()
        if str(data.get("_auth_user_id")) == str(user.pk):
            found.append((session, data))
    return found


def _when(value: object) -> datetime | None:
    return parse_datetime(value) if isinstance(value, str) else None


# --- the second factor again --------------------------------------------------------------------


def confirm_code(request: HttpRequest, *, user: User, code: str) -> Device:
    """The device that accepts `code` (a backup code is spent), else `Refused`, audited."""
    code = "".join(code.split())
    device = django_otp.match_token(user, code) if code else None
    if device is None:
        audit.record_request(
            AuditEvent.Kind.SECOND_FACTOR_REFUSED, request, username=user.get_username()
        )
        raise Refused(
            _(
                "That code was not accepted. Enter a current code from your authenticator app,"
                " or an unused backup code."
            ),
            code="bad_code",
        )
    return device


# --- devices ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """An authenticator being added: shown until a code from it confirms it."""

    device: TOTPDevice
    qr_data_uri: str
    secret: str  # base32, for typing into an app on the same phone
    url: str


def authenticators(user: User) -> list[TOTPDevice]:
    return list(TOTPDevice.objects.filter(user=user, confirmed=True).order_by("pk"))


def pending(user: User) -> list[Pending]:
    found = []
    for device in TOTPDevice.objects.filter(user=user, confirmed=False).order_by("pk"):
        url = device.config_url
        found.append(
            Pending(
                device=device,
                qr_data_uri=segno.make(url, error="m").svg_data_uri(scale=5, border=2),
                secret=_base32(device),
                url=url,
            )
        )
    return found


def unused_backup_codes(user: User) -> int:
    return int(StaticToken.objects.filter(device__user=user, device__confirmed=True).count())


def start_authenticator(request: HttpRequest, *, user: User, name: str, code: str) -> TOTPDevice:
    """A new authenticator, not yet counted: only a code from it confirms it."""
    confirm_code(request, user=user, code=code)
    name = " ".join(name.split())[:64] or _("authenticator app")
    return TOTPDevice.objects.create(user=user, name=name, confirmed=False)


def confirm_authenticator(request: HttpRequest, *, user: User, device_id: int, code: str) -> None:
    device = TOTPDevice.objects.filter(user=user, pk=device_id, confirmed=False).first()
    if device is None:
        raise Refused(_("There is no such authenticator waiting to be added."), code="not_found")
    if not device.verify_token("".join(code.split())):
        audit.record_request(
            AuditEvent.Kind.SECOND_FACTOR_REFUSED, request, username=user.get_username()
        )
        raise Refused(
            _(
                "That code does not match the new authenticator. Scan the code again, then enter"
                " the six digits it shows."
            ),
            code="bad_code",
        )
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    audit.record_request(
        AuditEvent.Kind.DEVICE_ADDED, request, username=user.get_username(), device=device.name
    )


def cancel_authenticator(*, user: User, device_id: int) -> None:
    """Forget an authenticator not yet confirmed: it never counted, so no code is asked."""
    TOTPDevice.objects.filter(user=user, pk=device_id, confirmed=False).delete()


def remove_authenticator(request: HttpRequest, *, user: User, device_id: int, code: str) -> None:
    with transaction.atomic():
        # Two removals at once must not each see the other's device as the one that remains.
        devices = list(
            TOTPDevice.objects.select_for_update().filter(user=user, confirmed=True).order_by("pk")
        )
        device = next((d for d in devices if d.pk == device_id), None)
        if device is None:
            raise Refused(_("There is no such authenticator."), code="not_found")
        if len(devices) < 2:
            raise Refused(
                _("This is your only authenticator: add another one before removing it."),
                code="last_device",
            )
        verified = confirm_code(request, user=user, code=code)
        removed_id, removed_pk = device.persistent_id, device.pk  # delete() forgets the pk
        was_this_sessions = request.session.get(DEVICE_ID_SESSION_KEY) == removed_id
        device.delete()
        audit.record_request(
            AuditEvent.Kind.DEVICE_REMOVED,
            request,
            username=user.get_username(),
            device=device.name,
        )
    if was_this_sessions:
        # This session was opened with the removed device; it stays open on the device that
        # just confirmed the change (or another remaining one, when that was the removed one).
        spent = verified.persistent_id == removed_id
        django_otp.login(
            request, next(d for d in devices if d.pk != removed_pk) if spent else verified
        )


def renew_backup_codes(request: HttpRequest, *, user: User, code: str) -> list[str]:
    """New backup codes, shown once; every old one stops working."""
    confirm_code(request, user=user, code=code)
    with transaction.atomic():
        device = StaticDevice.objects.filter(user=user).order_by("pk").first()
        if device is None:
            device = StaticDevice.objects.create(user=user, name="backup codes", confirmed=True)
        StaticToken.objects.filter(device__user=user).delete()
        codes = [StaticToken.random_token() for _ in range(BACKUP_CODES)]
        StaticToken.objects.bulk_create(StaticToken(device=device, token=c) for c in codes)
        audit.record_request(
            AuditEvent.Kind.BACKUP_CODES_RENEWED,
            request,
            username=user.get_username(),
            codes=len(codes),
        )
    return codes


def _base32(device: TOTPDevice) -> str:
    return base64.b32encode(device.bin_key).decode().rstrip("=")
