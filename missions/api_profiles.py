"""Domain profiles over /api/v1/profiles: what a mission may start with (`profile` in the body of
POST /api/v1/missions), read and edited as on the Agents & policies screen, through the same
service (`missions.profiles`). A refused edit writes nothing: 422 naming each wrong field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict, StrictInt

from agentos.core import audit
from agentos.core.schemas import Text
from missions import profiles
from missions.api import not_found
from missions.models import Profile

router = Router(tags=["profiles"])

ROUTES = (
    "Per role: {provider, model, effort} or {effort} alone (the role's default model at that"
    " effort); a route the mission names wins"
)


class ProfileIn(Schema):
    """The whole profile: a field left out takes a new profile's default."""

    model_config = ConfigDict(extra="forbid")

    description: Text = Field("", max_length=profiles.MAX_DESCRIPTION)
    routes: dict[str, dict[str, Any]] = Field(default_factory=dict, description=ROUTES)
    tools: list[str] = Field(
        default_factory=list, description="Built-in tools its agents may use; empty: every tool"
    )
    mcp_servers: list[str] = Field(
        default_factory=list, description="Approved MCP servers added to each mission's"
    )
    skills: list[str] = Field(
        default_factory=list, description="Skills offered, by name; empty: every skill found"
    )
    sandbox_level: Literal[0, 1, 2] = Field(
        1, description="The least level of its missions; a mission's risk class may raise it"
    )
    criteria: list[str] = Field(
        default_factory=list,
        description="A mission's criteria when it gives none: '$ command' (must succeed in the"
        " project's repository) or a statement an independent evaluator checks",
    )
    max_tokens: StrictInt | None = Field(None, description="A mission's cap when it names none")
    max_usd_micros: StrictInt | None = Field(None, description="Micro-dollars; idem")
    max_seconds: StrictInt | None = Field(None, description="Wall time of each root run; idem")


class ProfileOut(Schema):
    name: str
    description: str
    routes: dict[str, Any]
    tools: list[str]
    mcp_servers: list[str]
    skills: list[str]
    sandbox_level: int
    criteria: list[str]
    max_tokens: int | None
    max_usd_micros: int | None
    max_seconds: int | None
    updated_at: datetime


def profile_out(profile: Profile) -> dict[str, Any]:
    return {name: getattr(profile, name) for name in ("name", *profiles.FIELDS, "updated_at")}


@router.get("/profiles", response=list[ProfileOut], summary="The domain profiles, by name")
def list_profiles(request: HttpRequest) -> list[dict[str, Any]]:
    return [profile_out(profile) for profile in Profile.objects.order_by("name")]


@router.get("/profiles/{name}", response=ProfileOut, summary="One domain profile")
def get_profile(request: HttpRequest, name: str) -> dict[str, Any]:
    profile = Profile.objects.filter(name=name).first()
    if profile is None:
        raise not_found("profile", name)
    return profile_out(profile)


@router.put(
    "/profiles/{name}",
    response={200: ProfileOut, 201: ProfileOut},
    summary="Create a profile, or replace one (missions already started keep theirs)",
)
def put_profile(request: HttpRequest, name: str, payload: ProfileIn) -> Status[dict[str, Any]]:
    exists = Profile.objects.filter(name=name).exists()
    profile = profiles.save(
        name,
        payload.model_dump(),
        actor=audit.Actor.of(request),
        create=not exists,
    )
    return Status(200 if exists else 201, profile_out(profile))
