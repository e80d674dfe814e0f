"""Webhooks: missions started by an outsider's signed request (docs/design.md §12, §19).

- The owner creates an endpoint (`create`): a name, a preset (how deliveries are signed) and a
  mission template (`blueprints.clean`). Its secret is made here, shown once, and kept encrypted
  by the vault (`agentos.core.vault`): HMAC needs it back, so it cannot be hashed.
- A delivery (`receive`) is verified before anything is read or stored: the `agentos` preset
  signs "<t>.<raw body>" with a timestamp that must fall within `WINDOW` of now (both ways),
  the `github` preset signs the raw body (`X-Hub-Signature-256`). A refused signature only
  bumps a counter on the endpoint: nobody without the secret can fill the disk.
- A verified delivery is stored and becomes a mission through the one pipeline
  (`blueprints.start`) in the same transaction: the row is `accepted` with its mission, or
  `failed` with why (no model, project gone...), never half-written. The payload is a
  `launch.Brief` of trust `web`, data after the template's goal, never part of it; the run is
  marked untrusted from its start (`kernel.exposure`, the rule of two).
- Deliveries are unique per endpoint by the sender's id and by their signature: a repeat (or a
  captured request resent under a new id) is answered with the first one's mission, even under
  a race (the unique constraints and the row's lock decide). A repeat of a failed delivery, or
  the owner's replay, runs the pipeline again on the stored body.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone

from agentos.core import audit, vault
from agentos.core.errors import DomainError
from agentos.core.models import AuditEvent
from kernel import exposure
from kernel.models import Run, Trust
from missions import blueprints
from missions.launch import Brief
from missions.models import DeliveryStatus, Webhook, WebhookDelivery, WebhookPreset

MAX_BODY = 2**20  # bytes of a delivery's body; more is refused (413) unread
WINDOW = timedelta(minutes=5)  # how far an agentos signature's timestamp may be from now
# What of a body the model is given: a payload is data to act on, not a book to read.
MAX_BRIEF = 100_000
MAX_NAME = 120
MAX_DELIVERY_ID = 200
# Headers kept with a delivery, for the owner's list (never a signature or a secret).
KEPT_HEADERS = ("Content-Type", "User-Agent", "X-GitHub-Event", "X-GitHub-Hook-ID")
MAX_HEADER = 200

_DELIVERY_ID = re.compile(r"[\x21-\x7e]{1,200}")
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Preset:
    """Where a preset's sender puts the delivery id and the signature."""

    delivery_header: str
    signature_header: str


PRESETS = {
    WebhookPreset.AGENTOS: Preset("X-Agentos-Delivery", "X-Agentos-Signature"),
    WebhookPreset.GITHUB: Preset("X-GitHub-Delivery", "X-Hub-Signature-256"),
}


class WebhookError(DomainError):
    """A webhook or a delivery was refused; nothing was written (but a refusal's counter)."""


@dataclass(frozen=True)
class Created:
    webhook: Webhook
    secret: str  # shown once, to the owner who created it


@dataclass(frozen=True)
class Outcome:
    """What a delivery became: `duplicate` when it (or its signature) was received before."""

    delivery: WebhookDelivery
    duplicate: bool
    failure: DomainError | None = None


# --- The owner's endpoints ---------------------------------------------------------------------


def create(
    *, name: str, mission: Any, preset: str = WebhookPreset.AGENTOS, actor: audit.Actor
) -> Created:
    """A new endpoint with a fresh secret; the template is checked first (422 naming each
    wrong field)."""
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > MAX_NAME:
        raise WebhookError(
            f"A webhook's name is 1 to {MAX_NAME} characters.",
            code="invalid_input",
            status=422,
            details={"fields": {"name": [f"1 to {MAX_NAME} characters."]}},
        )
    if preset not in PRESETS:
        raise WebhookError(
            f"Unknown preset {preset!r}: one of {', '.join(PRESETS)}.",
            code="invalid_input",
            status=422,
            details={"fields": {"preset": [f"One of {', '.join(PRESETS)}."]}},
        )
    template = blueprints.clean(mission)
    secret = "whsec_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        webhook = Webhook.objects.create(
            name=name,
            key=secrets.token_urlsafe(24),
            preset=preset,
            ciphertext=vault.encrypt(secret),
            mission=template,
        )
        _changed(actor, webhook, "created")
    return Created(webhook=webhook, secret=secret)


def get(webhook_id: int) -> Webhook:
    found = Webhook.objects.filter(pk=webhook_id).first()
    if found is None:
        raise WebhookError(f"No webhook {webhook_id}.", code="not_found", status=404)
    return found


def delete(webhook_id: int, *, actor: audit.Actor) -> None:
    """The endpoint and its deliveries; the missions they started stay."""
    with transaction.atomic():
        webhook = get(webhook_id)
        _changed(actor, webhook, "deleted")
        webhook.delete()


def _changed(actor: audit.Actor, webhook: Webhook, change: str) -> None:
    audit.record_by(
        AuditEvent.Kind.WEBHOOK_CHANGED,
        actor,
        webhook=webhook.pk,
        name=webhook.name,
        change=change,
        by=actor.by,
    )


def deliveries(webhook: Webhook, *, limit: int = 50) -> list[WebhookDelivery]:
    return list(
        webhook.deliveries.select_related("mission").order_by("-received_at", "-pk")[:limit]
    )


def listed() -> QuerySet[Webhook]:
    """The endpoints by name, each with `failed_deliveries` counted in the same query."""
    failed = Count("deliveries", filter=Q(deliveries__status=DeliveryStatus.FAILED))
    return Webhook.objects.annotate(failed_deliveries=failed).order_by("name", "pk")


def failed_count(webhook: Webhook) -> int:
    counted = getattr(webhook, "failed_deliveries", None)
    if isinstance(counted, int):
        return counted
    return webhook.deliveries.filter(status=DeliveryStatus.FAILED).count()


# --- Deliveries --------------------------------------------------------------------------------


def verify(
    webhook: Webhook, *, headers: Mapping[str, str], body: bytes, now: datetime | None = None
) -> str:
    """The delivery's signature (its hex digest) if the secret made it, else `WebhookError`
    (401, saying what is wrong) after counting the refusal on the endpoint."""
    try:
        return _verify(webhook, headers=headers, body=body, now=now or timezone.now())
    except WebhookError:
        # One statement, no row: a flood of forgeries costs a counter, never the disk.
        Webhook.objects.filter(pk=webhook.pk).update(
            rejected=F("rejected") + 1, last_rejected_at=timezone.now()
        )
        raise


def _verify(webhook: Webhook, *, headers: Mapping[str, str], body: bytes, now: datetime) -> str:
    preset = PRESETS[WebhookPreset(webhook.preset)]
    given = headers.get(preset.signature_header, "")
    if not given:
        raise _refused(f"The {preset.signature_header} header is missing.")
    key = _secret(webhook).encode()
    if webhook.preset == WebhookPreset.GITHUB:
        scheme, _sep, digest = given.partition("=")
        if scheme != "sha256" or not _HEX.fullmatch(digest):
            raise _refused(f"{preset.signature_header} is not 'sha256=<64 hex digits>'.")
        expected = hmac.new(key, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, digest):
            raise _refused("The signature does not match the body and this webhook's secret.")
        return expected
    parts: dict[str, list[str]] = {}
    for item in given.split(","):
        name, _sep, value = item.strip().partition("=")
        parts.setdefault(name, []).append(value)
    stamps = parts.get("t", [])
    digests = [d for d in parts.get("v1", []) if _HEX.fullmatch(d)]
    if len(stamps) != 1 or not stamps[0].isdigit() or len(stamps[0]) > 12 or not digests:
        raise _refused(f"{preset.signature_header} is not 't=<unix seconds>,v1=<64 hex digits>'.")
    sent = int(stamps[0])
    age = now.timestamp() - sent
    if age > WINDOW.total_seconds():
        raise _refused(
            f"The signature's timestamp is {int(age)} s old: at most"
            f" {int(WINDOW.total_seconds())} s are accepted (sign each request when it is sent)."
        )
    if -age > WINDOW.total_seconds():
        raise _refused(
            f"The signature's timestamp is {int(-age)} s in the future: at most"
            f" {int(WINDOW.total_seconds())} s are accepted (check the sender's clock)."
        )
    expected = hmac.new(key, f"{sent}.".encode() + body, hashlib.sha256).hexdigest()
    # Every v1 is compared (a sender may sign with two secrets while rotating).
    if not any(hmac.compare_digest(expected, digest) for digest in digests):
        raise _refused("The signature does not match the timestamp, body and this secret.")
    return expected


def _refused(message: str) -> WebhookError:
    return WebhookError(message, code="bad_signature", status=401)


def _secret(webhook: Webhook) -> str:
    try:
        return vault.decrypt(bytes(webhook.ciphertext))
    except vault.Unreadable:
        raise WebhookError(
            "This webhook's secret cannot be read (the vault's keys were replaced): create it"
            " again.",
            code="secret_unreadable",
            status=503,
        ) from None


def delivery_id_of(webhook: Webhook, headers: Mapping[str, str]) -> str:
    header = PRESETS[WebhookPreset(webhook.preset)].delivery_header
    found = headers.get(header, "").strip()
    if not _DELIVERY_ID.fullmatch(found):
        raise WebhookError(
            f"The {header} header is required: 1 to {MAX_DELIVERY_ID} visible ASCII characters,"
            " unique per delivery.",
            code="missing_delivery_id",
            status=400,
        )
    return found


def receive(
    webhook: Webhook,
    *,
    headers: Mapping[str, str],
    body: bytes,
    signature: str,
) -> Outcome:
    """Store a verified delivery and start its mission, in one transaction (see the module's
    docstring): a new delivery, or a repeat of a failed one, runs the pipeline; a repeat of an
    accepted one is answered with its mission."""
    delivery_id = delivery_id_of(webhook, headers)
    kept = {name: headers[name][:MAX_HEADER] for name in KEPT_HEADERS if headers.get(name)}
    with transaction.atomic():
        # ON CONFLICT DO NOTHING: a concurrent insert of the same id waits for the other's
        # commit, then finds its row below (locked, so one attempt runs at a time).
        WebhookDelivery.objects.bulk_create(
            [
                WebhookDelivery(
                    webhook=webhook,
                    delivery_id=delivery_id,
                    signature=signature,
                    headers=kept,
                    body=body,
                    status=DeliveryStatus.RECEIVED,
                )
            ],
            ignore_conflicts=True,
        )
        delivery = (
            WebhookDelivery.objects.select_for_update()
            .filter(Q(delivery_id=delivery_id) | Q(signature=signature), webhook=webhook)
            .order_by("pk")
            .first()
        )
        if delivery is None:  # inserted or found under one of the two constraints: never
            raise WebhookError("The delivery could not be stored.", code="conflict", status=409)
        fresh = delivery.status == DeliveryStatus.RECEIVED
        if not fresh:
            WebhookDelivery.objects.filter(pk=delivery.pk).update(repeats=F("repeats") + 1)
            if delivery.status == DeliveryStatus.ACCEPTED:
                return Outcome(delivery=delivery, duplicate=True)
        failure = _attempt(webhook, delivery)
    return Outcome(delivery=delivery, duplicate=False, failure=failure)


def find_delivery(webhook: Webhook, named: str | int) -> WebhookDelivery:
    """A delivery of `webhook` by the sender's delivery id, else by our id (the list has both)."""
    found = webhook.deliveries.filter(delivery_id=str(named)).first()
    if found is None and str(named).isdigit():
        found = webhook.deliveries.filter(pk=int(named)).first()
    if found is None:
        raise WebhookError(
            f"Webhook {webhook.pk} has no delivery {str(named)[:200]!r}.",
            code="not_found",
            status=404,
        )
    return found


def replay(webhook: Webhook, found: WebhookDelivery, *, actor: audit.Actor) -> Outcome:
    """The owner's replay of a failed delivery: the pipeline again on its stored body."""
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_for_update().get(pk=found.pk, webhook=webhook)
        if delivery.status == DeliveryStatus.ACCEPTED:
            raise WebhookError(
                f"Delivery {delivery.delivery_id} was accepted: it started mission"
                f" {delivery.mission_id}."
                " Only a failed delivery is replayed.",
                code="already_accepted",
                status=409,
                details={"mission_id": delivery.mission_id},
            )
        failure = _attempt(webhook, delivery)
        _changed(actor, webhook, f"delivery {delivery.delivery_id} replayed")
    return Outcome(delivery=delivery, duplicate=False, failure=failure)


def _attempt(webhook: Webhook, delivery: WebhookDelivery) -> DomainError | None:
    """Start the delivery's mission (a savepoint: a refusal leaves nothing of it) and settle
    the row with it, or with why not. The caller holds the row's lock."""
    delivery.attempts += 1
    delivery.settled_at = timezone.now()
    try:
        with transaction.atomic():
            mission, run = blueprints.start(
                webhook.mission, trigger=f"webhook:{webhook.pk}", brief=brief_of(webhook, delivery)
            )
            # Before its first step (the rule of two): the tree reads an outsider's payload.
            exposure.mark(run.pk, {exposure.UNTRUSTED}, seq=0, by=f"webhook {webhook.name}")
    except DomainError as refused:
        delivery.status = DeliveryStatus.FAILED
        delivery.error = refused.message
        delivery.error_code = refused.code[:40]
        delivery.save(update_fields=["status", "error", "error_code", "attempts", "settled_at"])
        return refused
    delivery.status = DeliveryStatus.ACCEPTED
    delivery.mission = mission
    delivery.error = ""
    delivery.error_code = ""
    delivery.save(
        update_fields=["status", "error", "error_code", "mission", "attempts", "settled_at"]
    )
    return None


def brief_of(webhook: Webhook, delivery: WebhookDelivery) -> Brief:
    """The payload as the model is given it: data of trust `web` named by the endpoint (the
    owner's words), never the sender's headers. NUL cannot be stored in a run's input."""
    text = bytes(delivery.body).decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    if len(text) > MAX_BRIEF:
        text = (
            text[:MAX_BRIEF]
            + f"\n[cut: {len(text) - MAX_BRIEF} more characters not shown; the owner has the"
            " whole delivery]"
        )
    return Brief(text=text, source=f"webhook {webhook.name}", trust=Trust.WEB)


def root_run(delivery: WebhookDelivery) -> Run | None:
    if delivery.mission_id is None:
        return None
    return Run.objects.filter(account_id=delivery.mission_id, parent__isnull=True).first()
