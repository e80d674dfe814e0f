"""Web Push: when something waits for the owner, or a cap is 80 % used, the phones that
subscribed are told.

- Keys: one VAPID pair, made on first need (the workers' start, or the Settings page), its
  private half encrypted by the vault (`PushState.vapid_private`); only the public half leaves
  the server, for browsers to subscribe with.
- Subscriptions: posted by the console (`static/console.js`); one row per browser.
- Delivery follows the event stream (`kernel.stream`), never the code that opens a wait: a
  wait is recorded whatever happens here, and a push service that is slow or down delays only
  the notification. What to tell and when is `approvals.notifications`; this module says a
  wait or a notice in a line and posts it.

Payloads are encrypted to each browser (RFC 8291, aes128gcm) and name the wait in one line;
the push service sees neither. Endpoints are capability URLs: logged by host only.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from py_vapid import Vapid
from pywebpush import WebPushException, webpush

from agentos.core import audit, vault
from agentos.core.errors import DomainError
from agentos.core.models import AuditEvent, PushState, PushSubscription
from approvals import inbox
from kernel import stream
from kernel.models import Event, Wait, WaitKind

logger = logging.getLogger(__name__)

# Seconds a push service has to answer; a notification is worth less than a stuck worker.
SEND_TIMEOUT = 10
# How long the push service keeps a message for a phone that is off (an approval lasts longer,
# but a day-old notification is noise: the Home screen lists what still waits).
TTL_SECONDS = 24 * 3600
BATCH = 50
TEXT_CHARS = 120
# Gone for good: the browser unsubscribed or the push service forgot it.
GONE = {404, 410}


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    url: str
    tag: str

    def payload(self) -> str:
        return json.dumps(
            {"title": self.title, "body": self.body, "url": self.url, "tag": self.tag},
            ensure_ascii=False,
        )


@dataclass(frozen=True)
class Sent:
    delivered: int
    dropped: int
    failed: int


# --- keys ---------------------------------------------------------------------------------------


def state() -> PushState:
    """The push state, made on first need with a fresh VAPID key pair and a cursor at the
    stream's head (waits opened before notifications existed are on the Home screen)."""
    found = PushState.objects.filter(pk=1).first()
    if found is not None:
        return found
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    stream.sequence()
    try:
        with transaction.atomic():
            return PushState.objects.create(
                pk=1,
                vapid_private=vault.encrypt(pem),
                vapid_public=_b64(public),
                cursor=stream.head(),
            )
    except IntegrityError:  # another process made it first: theirs is the one
        return PushState.objects.get(pk=1)


def public_key() -> str:
    return state().vapid_public


def _vapid(push_state: PushState) -> Vapid:
    return Vapid.from_pem(vault.decrypt(bytes(push_state.vapid_private)).encode())


# --- subscriptions ------------------------------------------------------------------------------


def subscriptions() -> list[PushSubscription]:
    return list(PushSubscription.objects.all())


def subscribe(*, subscription: Any, agent: str, username: str, address: str | None) -> None:
    """Keep a browser's subscription (`PushSubscription.toJSON()`); the same endpoint again
    replaces its keys."""
    endpoint, p256dh, auth = _parse(subscription)
    _, created = PushSubscription.objects.update_or_create(
        endpoint=endpoint, defaults={"p256dh": p256dh, "auth": auth, "agent": agent[:200]}
    )
    if created:
        audit.record(
            AuditEvent.Kind.PUSH_SUBSCRIBED,
            username=username,
            address=address,
            host=_host(endpoint),
            agent=agent[:200],
        )


def unsubscribe(*, endpoint: str, username: str, address: str | None) -> bool:
    deleted, _ = PushSubscription.objects.filter(endpoint=endpoint).delete()
    if deleted:
        audit.record(
            AuditEvent.Kind.PUSH_UNSUBSCRIBED,
            username=username,
            address=address,
            host=_host(endpoint),
        )
    return bool(deleted)


def _parse(subscription: Any) -> tuple[str, str, str]:
    if not isinstance(subscription, dict):
        raise DomainError(_("This is not a push subscription."), code="bad_subscription")
    endpoint = subscription.get("endpoint")
    keys = subscription.get("keys")
    if not isinstance(endpoint, str) or not isinstance(keys, dict):
        raise DomainError(_("This is not a push subscription."), code="bad_subscription")
    p256dh, auth = keys.get("p256dh"), keys.get("auth")
    if not isinstance(p256dh, str) or not isinstance(auth, str):
        raise DomainError(_("This is not a push subscription."), code="bad_subscription")
    try:
        point = _unb64(p256dh)
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        secret = _unb64(auth)
    except ValueError:
        raise DomainError(_("This is not a push subscription."), code="bad_subscription") from None
    if len(secret) != 16 or len(endpoint) > 1000:
        raise DomainError(_("This is not a push subscription."), code="bad_subscription")
    _check_endpoint(endpoint)
    return endpoint, p256dh, auth


def _check_endpoint(endpoint: str) -> None:
    """Push services are on the internet, over https: the server posts to this URL, so it must
    not be a way to make it call something on its own network."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    loopback_allowed = getattr(settings, "PUSH_ALLOW_LOOPBACK", False)
    if loopback_allowed and parts.scheme == "http" and address is not None and address.is_loopback:
        return  # the tests' local push service
    local = address is not None and not address.is_global
    if parts.scheme != "https" or not host or local or host == "localhost":
        raise DomainError(
            _("Notifications need a push service reached over https."), code="bad_subscription"
        )


# --- what to say --------------------------------------------------------------------------------


def message_for(wait: Wait) -> Message | None:
    """The notification of a wait for the owner (None for timers and joins: nobody waits on
    the owner there). Says what it is in a line; the page it opens says the rest."""
    question = wait.question if isinstance(wait.question, dict) else {}
    mission = _mission_title(wait)
    tag = f"wait-{wait.pk}"
    if wait.kind == WaitKind.RECONCILE:
        return Message(
            title=_("An outcome is unknown"),
            body=_("Did the interrupted action happen? %(mission)s") % {"mission": mission},
            url=reverse("console:reconciliation", args=[wait.pk]),
            tag=tag,
        )
    if wait.kind != WaitKind.HUMAN:
        return None
    if question.get("type") == "approval":
        return Message(
            title=_("Approval needed"),
            body=_line(inbox.sentence(question, None)) + (f" · {mission}" if mission else ""),
            url=reverse("console:approval", args=[wait.pk]),
            tag=tag,
        )
    return Message(
        title=_("A question for you"),
        body=_line(str(question.get("text", ""))) or mission,
        url=reverse("console:question", args=[wait.pk]),
        tag=tag,
    )


def notice_message(event: Event) -> Message:
    """A cap 80 % used (`kernel.notices`: the kernel's words, never an agent's); it opens the
    mission, or the costs page for the day's cap."""
    url = (
        reverse("console:mission", args=[event.account_id])
        if event.account_id is not None
        else reverse("console:costs")
    )
    return Message(
        title=_("A cap is 80 % used"),
        body=_line(str(event.data.get("message", ""))),
        url=url,
        tag=f"notice-{event.data.get('key', event.pk)}",
    )


def _mission_title(wait: Wait) -> str:
    mission = getattr(getattr(wait.run, "account", None), "mission", None)
    goal = getattr(mission, "goal", "") if mission is not None else ""
    return _line(str(goal or ""))


def _line(text: str) -> str:
    return Truncator(" ".join(text.split())).chars(TEXT_CHARS)


# --- delivery -----------------------------------------------------------------------------------


def send(message: Message) -> Sent:
    """Post `message` to every subscription; drop those the push service says are gone."""
    vapid = _vapid(state())
    delivered = dropped = failed = 0
    for subscription in PushSubscription.objects.all():
        outcome = _post(subscription, message, vapid)
        if outcome == "sent":
            delivered += 1
            PushSubscription.objects.filter(pk=subscription.pk).update(last_sent_at=timezone.now())
        elif outcome == "gone":
            dropped += 1
            subscription.delete()
        else:
            failed += 1
    return Sent(delivered=delivered, dropped=dropped, failed=failed)


def send_test() -> Sent:
    return send(
        Message(
            title=_("Notifications work"),
            body=_("This device will be told when something waits for you."),
            url=reverse("console:settings") + "#notifications",
            tag="test",
        )
    )


def _post(subscription: PushSubscription, message: Message, vapid: Vapid) -> str:
    info = {
        "endpoint": subscription.endpoint,
        "keys": {"p256dh": subscription.p256dh, "auth": subscription.auth},
    }
    try:
        webpush(
            info,
            data=message.payload(),
            vapid_private_key=vapid,
            vapid_claims={"sub": _contact()},
            timeout=SEND_TIMEOUT,
            ttl=TTL_SECONDS,
            headers={"Urgency": "high"},
        )
    except WebPushException as error:
        status = getattr(error.response, "status_code", None)
        if status in GONE:
            logger.info("push subscription %s gone (%s): dropped", subscription.pk, status)
            return "gone"
        logger.warning("push to %s failed: %s", _host(subscription.endpoint), status or "no answer")
        return "failed"
    except Exception as error:  # a network error, a refused connection: this push only
        logger.warning(
            "push to %s failed: %s", _host(subscription.endpoint), error.__class__.__name__
        )
        return "failed"
    return "sent"


def _contact() -> str:
    # Push services want a way to reach the sender (RFC 8292 `sub`): the owner's, set in
    # Settings (`approvals.push_sender`), else the server's setting.
    saved = PushState.objects.filter(pk=1).values_list("contact", flat=True).first()
    return saved or str(settings.PUSH_CONTACT)


def _host(endpoint: str) -> str:
    return urlsplit(endpoint).hostname or "?"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as error:
        raise ValueError("not base64") from error
