"""Webhooks over /api/v1/webhooks: the owner's endpoints and their deliveries
(`missions.webhooks`). Deliveries themselves arrive at each endpoint's `url`, outside this API
(`missions.webhook_receiver`): the signature is their authentication, not a token.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict

from agentos.core import audit, idempotency
from agentos.core.schemas import Text
from missions import webhooks
from missions.models import Webhook, WebhookDelivery

router = Router(tags=["webhooks"])


class WebhookIn(Schema):
    model_config = ConfigDict(extra="forbid")

    name: Text = Field(min_length=1, max_length=webhooks.MAX_NAME)
    mission: dict[str, Any] = Field(
        description="The mission each delivery starts: the fields of POST /api/v1/missions."
        " The payload is given to its agent as untrusted data after the goal, never in it."
    )
    preset: Literal["agentos", "github"] = Field(
        "agentos",
        description="agentos: X-Agentos-Delivery and X-Agentos-Signature: t=<unix seconds>,"
        'v1=<hex HMAC-SHA256 of "<t>.<raw body>">; github: X-GitHub-Delivery and'
        " X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>",
    )


class CreatedOut(Schema):
    id: int
    url: str = Field(description="Where deliveries are posted")
    secret: str = Field(description="The signing secret, shown once")


class WebhookOut(Schema):
    id: int
    name: str
    preset: str
    url: str
    mission: dict[str, Any]
    created_at: datetime
    rejected: int = Field(description="Requests refused for their signature (not stored)")
    last_rejected_at: datetime | None
    failed: int = Field(description="Deliveries whose mission could not start")


class DeliveryOut(Schema):
    id: int
    delivery_id: str = Field(description="The sender's id (X-Agentos-Delivery...)")
    received_at: datetime
    settled_at: datetime | None
    status: Literal["accepted", "failed"]
    error: str
    error_code: str
    mission_id: int | None
    attempts: int = Field(description="Times the pipeline ran on it (replays included)")
    repeats: int = Field(description="Times the same delivery was received again")
    headers: dict[str, str]
    size: int = Field(description="Bytes of its body")


class DeliveriesQuery(Schema):
    limit: int = Field(50, ge=1, le=200)


def url_of(request: HttpRequest, webhook: Webhook) -> str:
    return request.build_absolute_uri(reverse("console:webhook-receive", args=[webhook.key]))


def webhook_out(request: HttpRequest, webhook: Webhook) -> dict[str, Any]:
    return {
        "id": webhook.pk,
        "name": webhook.name,
        "preset": webhook.preset,
        "url": url_of(request, webhook),
        "mission": webhook.mission,
        "created_at": webhook.created_at,
        "rejected": webhook.rejected,
        "last_rejected_at": webhook.last_rejected_at,
        "failed": webhooks.failed_count(webhook),
    }


def delivery_out(delivery: WebhookDelivery) -> dict[str, Any]:
    return {
        "id": delivery.pk,
        "delivery_id": delivery.delivery_id,
        "received_at": delivery.received_at,
        "settled_at": delivery.settled_at,
        "status": delivery.status,
        "error": delivery.error,
        "error_code": delivery.error_code,
        "mission_id": delivery.mission_id,
        "attempts": delivery.attempts,
        "repeats": delivery.repeats,
        "headers": delivery.headers,
        "size": len(bytes(delivery.body)),
    }


@router.post(
    "/webhooks",
    response={201: CreatedOut},
    summary="Create a webhook (its secret is returned once)",
)
@idempotency.withholds_secret
def create_webhook(request: HttpRequest, payload: WebhookIn) -> Status[dict[str, Any]]:
    created = webhooks.create(
        name=payload.name,
        mission=payload.mission,
        preset=payload.preset,
        actor=audit.Actor.of(request),
    )
    return Status(
        201,
        {
            "id": created.webhook.pk,
            "url": url_of(request, created.webhook),
            "secret": created.secret,
        },
    )


@router.get("/webhooks", response=list[WebhookOut], summary="The webhooks")
def list_webhooks(request: HttpRequest) -> list[dict[str, Any]]:
    return [webhook_out(request, webhook) for webhook in webhooks.listed()]


@router.get("/webhooks/{webhook_id}", response=WebhookOut, summary="A webhook")
def get_webhook(request: HttpRequest, webhook_id: int) -> dict[str, Any]:
    return webhook_out(request, webhooks.get(webhook_id))


@router.delete(
    "/webhooks/{webhook_id}",
    response={204: None},
    summary="Delete a webhook and its deliveries (the missions they started stay)",
)
def delete_webhook(request: HttpRequest, webhook_id: int) -> Status[None]:
    webhooks.delete(webhook_id, actor=audit.Actor.of(request))
    return Status(204, None)


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    response=list[DeliveryOut],
    summary="A webhook's deliveries, newest first",
)
def list_deliveries(
    request: HttpRequest, webhook_id: int, query: Query[DeliveriesQuery]
) -> list[dict[str, Any]]:
    found = webhooks.deliveries(webhooks.get(webhook_id), limit=query.limit)
    return [delivery_out(delivery) for delivery in found]


@router.post(
    "/webhooks/{webhook_id}/deliveries/{delivery_id}/replay",
    response=DeliveryOut,
    summary="Run a failed delivery's mission pipeline again on its stored body"
    " (by the sender's delivery id, or the delivery's id in the list)",
)
def replay_delivery(request: HttpRequest, webhook_id: int, delivery_id: str) -> dict[str, Any]:
    webhook = webhooks.get(webhook_id)
    outcome = webhooks.replay(
        webhook, webhooks.find_delivery(webhook, delivery_id), actor=audit.Actor.of(request)
    )
    if outcome.failure is not None:
        # Stored as failed again (its attempts counted); the owner is told why, as at creation.
        failure = outcome.failure
        raise webhooks.WebhookError(
            failure.message,
            code=failure.code,
            status=failure.status,
            details={"delivery": delivery_out(outcome.delivery)},
        )
    return delivery_out(outcome.delivery)
