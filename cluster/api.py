"""The owner's API bridges over /api/v1 (`cluster.bridges`): list, add or change, remove. A
bridge's key is written here and never read back: answers show its last characters only."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from agentos.core.audit import Actor
from cluster import bridges
from cluster.models import ApiBridge

router = Router(tags=["bridges"])


class BridgeIn(Schema):
    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(max_length=500, description="http(s)://host[:port][/path]")
    secret: str | None = Field(
        None,
        max_length=bridges.MAX_SECRET,
        description="The key; required for a new bridge, omitted to keep the stored one",
    )
    header: str = Field("Authorization", max_length=100)
    template: str = Field("Bearer {secret}", max_length=200, description="The header's value")
    usd_micros_per_call: int = Field(0, ge=0, le=10**12, description="Counted against caps")


class BridgeOut(Schema):
    name: str
    base_url: str
    header: str
    template: str
    hint: str
    usd_micros_per_call: int
    updated_at: str


@router.get("/bridges", response=list[BridgeOut], summary="The owner's API bridges")
def list_bridges(request: HttpRequest) -> list[dict[str, Any]]:
    return [bridges.describe(bridge) for bridge in ApiBridge.objects.all()]


@router.put(
    "/bridges/{name}",
    response={200: BridgeOut, 201: BridgeOut},
    summary="Add a bridge or change one (its key is never shown again)",
)
def put_bridge(request: HttpRequest, name: str, payload: BridgeIn) -> Status[dict[str, Any]]:
    created = not ApiBridge.objects.filter(name=name).exists()
    bridge = bridges.put(name, actor=Actor.of(request), **payload.model_dump())
    return Status(201 if created else 200, bridges.describe(bridge))


@router.delete("/bridges/{name}", response={204: None}, summary="Remove a bridge")
def delete_bridge(request: HttpRequest, name: str) -> Status[None]:
    bridges.remove(name, actor=Actor.of(request))
    return Status(204, None)
