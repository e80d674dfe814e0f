"""Missions and settings over /api/v1 (projects: `api_projects`; runs and steering: `api_runs`;
schedules: `api_schedules`).

Missions start through `missions.launch.create_mission`, as from the console, a schedule or
another agent; provider keys and global caps change through their services. Their
refusals (`MissionError`s, and the kernel's `KernelError`s for caps) become the API's error shape
in `agentos.api`; nothing is written when one is raised.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any, Literal

from django.db.models import Count, Q
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, StrictInt

from agentos.core import audit
from agentos.core.schemas import Text
from missions import actions, blueprints, endpoints, keys, launch, overview, search
from missions.blueprints import MissionIn
from missions.engine import outage
from missions.errors import MissionError
from missions.models import Mission, Project, ProviderEndpoint
from tools import levels

router = Router()


def not_found(what: str, pk: object) -> MissionError:
    return MissionError(f"No {what} {pk}.", code="not_found", status=404)


def project_or_404(project_id: int) -> Project:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        raise not_found("project", project_id)
    return project


# --- Missions -----------------------------------------------------------------------------------


class CapsOut(Schema):
    max_tokens: int | None
    max_usd_micros: int | None
    max_turns: int | None
    max_tool_calls: int | None
    max_seconds: int | None
    max_concurrent_runs: int


class SpentOut(Schema):
    tokens: int
    usd_micros: int
    turns: int
    tool_calls: int


class RunsSummaryOut(Schema):
    total: int
    by_status: dict[str, int]
    root_run_ids: list[int]


class MissionOut(Schema):
    id: int
    project_id: int
    goal: str
    definition_of_done: str
    criteria: list[dict[str, Any]]  # as written before the work: a run's output says which pass
    risk_class: str
    sandbox_level: int
    caps: CapsOut
    routes: dict[str, Any]
    mcp_servers: list[str]
    bridges: list[str]
    allowed_hosts: list[str]
    sensitive: bool
    profile: str | None = Field(description="The domain profile it started with, if any")
    created_at: datetime


class MissionCreatedOut(MissionOut):
    run_id: int
    offline: str | None = Field(description="The offline mission the offline model plays")


class ProviderWaitOut(Schema):
    run_id: int
    said: str = Field(description='In the owner\'s words: "Anthropic overloaded (529)"')
    until: datetime = Field(
        description="When the model is asked again, or when the owner's question expires"
    )
    owner: bool = Field(description="Waiting for the owner (a refused key, an unpaid account)")
    question: int | None = Field(description="The owner's question to answer, if owner")


class MissionItemOut(MissionOut):
    status: str | None = Field(
        description="Its outcome as the console shows it: done once a root run ended done, else "
        "its latest root run's status (or paused, stopping); null before its first run"
    )


class MissionDetailOut(MissionItemOut):
    spent: SpentOut
    runs: RunsSummaryOut
    waiting_on: list[ProviderWaitOut] = Field(
        description="Its runs held by a model provider's failure (details: each run's `waiting_on`)"
    )


class MissionPage(Schema):
    items: list[MissionItemOut]
    next: str | None = Field(description="Cursor of the next page; null on the last one")


class MissionFilter(Schema):
    project: int | None = None
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(50, ge=1, le=200)


def mission_out(mission: Mission) -> dict[str, Any]:
    return {
        "id": mission.pk,
        "project_id": mission.project_id,
        "goal": mission.goal,
        "definition_of_done": mission.definition_of_done,
        "criteria": list(mission.criteria or []),
        "risk_class": mission.risk_class,
        "sandbox_level": levels.level_for(mission.risk_class),
        "caps": {name: getattr(mission, name) for name in launch.MISSION_CAPS},
        "routes": mission.routes if isinstance(mission.routes, dict) else {},
        "mcp_servers": list(mission.mcp_servers or []),
        "bridges": list(mission.bridges or []),
        "allowed_hosts": list(mission.allowed_hosts or []),
        "sensitive": mission.sensitive,
        "profile": mission.profile.name if mission.profile is not None else None,
        "created_at": mission.created_at,
    }


def encode_cursor(mission: Mission) -> str:
    raw = json.dumps([mission.created_at.isoformat(), mission.pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The (created_at, id) a cursor names; 422 `invalid_cursor` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, pk = json.loads(raw)
        created_at = datetime.fromisoformat(at)
        if not isinstance(pk, int) or isinstance(pk, bool) or created_at.tzinfo is None:
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error):
        raise MissionError(
            "This cursor was not given by this API; start again without one.",
            code="invalid_cursor",
            status=422,
        ) from None
    return created_at, pk


@router.post(
    "/missions",
    response={201: MissionCreatedOut},
    tags=["missions"],
    summary="Create a mission and start its root run (the console's path, trigger 'api')",
)
def create_mission(request: HttpRequest, payload: MissionIn) -> Status[dict[str, Any]]:
    try:
        mission, run = blueprints.start(payload, trigger="api")
    except MissionError as refused:
        # A client is not on this origin's pages: the Settings screen by its full URL.
        if refused.code == "no_provider" and isinstance(refused.details, dict):
            settings_path = refused.details.get("settings", "")
            refused.details["settings"] = request.build_absolute_uri(settings_path)
        raise
    return Status(201, {**mission_out(mission), "run_id": run.pk, "offline": payload.offline})


@router.get(
    "/missions",
    response=MissionPage,
    tags=["missions"],
    summary="Missions, newest first, by pages (pass `next` back as `cursor`)",
)
def list_missions(request: HttpRequest, filters: Query[MissionFilter]) -> dict[str, Any]:
    found = Mission.objects.select_related("profile").order_by("-created_at", "-pk")
    if filters.project is not None:
        found = found.filter(project=project_or_404(filters.project))
    if filters.cursor is not None:
        at, pk = decode_cursor(filters.cursor)
        found = found.filter(Q(created_at__lt=at) | Q(created_at=at, pk__lt=pk))
    page = list(found[: filters.limit + 1])
    more = len(page) > filters.limit
    page = page[: filters.limit]
    # Every root run of the page in one query (the console's missions list reads them so too).
    roots = overview.roots_by_mission([mission.pk for mission in page])
    items = []
    for mission in page:
        state = overview.mission_state(roots.get(mission.pk, []))
        items.append({**mission_out(mission), "status": state.value if state else None})
    return {
        "items": items,
        "next": encode_cursor(page[-1]) if more else None,
    }


@router.get(
    "/missions/{mission_id}",
    response=MissionDetailOut,
    tags=["missions"],
    summary="A mission with what it spent and its runs by status",
)
def get_mission(request: HttpRequest, mission_id: int) -> dict[str, Any]:
    mission = Mission.objects.filter(pk=mission_id).first()
    if mission is None:
        raise not_found("mission", mission_id)
    by_status = dict(
        mission.runs.order_by()
        .values_list("status")
        .annotate(count=Count("pk"))
        .values_list("status", "count")
    )
    roots = overview.roots_by_mission([mission.pk]).get(mission.pk, [])
    state = overview.mission_state(roots)
    return {
        **mission_out(mission),
        "status": state.value if state else None,
        "spent": mission.spent(),
        "runs": {
            "total": sum(by_status.values()),
            "by_status": by_status,
            "root_run_ids": sorted(run.pk for run in roots),
        },
        "waiting_on": outage.waiting_in(mission.pk),
    }


# --- Settings -----------------------------------------------------------------------------------


class ProviderKeyOut(Schema):
    provider: str
    configured: bool
    source: Literal["environment", "console"] | None
    hint: str | None = Field(description="The last 4 characters of a key set from the console")
    updated_at: datetime | None


class ProviderKeyIn(Schema):
    model_config = ConfigDict(extra="forbid")

    key: Text = Field(max_length=500)


class EndpointIn(Schema):
    model_config = ConfigDict(extra="forbid")

    base_url: Text = Field(max_length=500, description="e.g. http://127.0.0.1:8080/v1")
    model: Text = Field(max_length=100, description="The model the server serves")
    context_window: StrictInt | None = Field(None, ge=1024, le=10_000_000)


class EndpointOut(Schema):
    base_url: str
    model: str


@router.get(
    "/settings/provider-keys",
    response=list[ProviderKeyOut],
    tags=["settings"],
    summary="Which provider keys are set, and where from (never a key)",
)
def list_provider_keys(request: HttpRequest) -> list[dict[str, object]]:
    return keys.status()


@router.put(
    "/settings/provider-keys/{provider}",
    response=ProviderKeyOut,
    tags=["settings"],
    summary="Set a provider's key (write-only: it is never shown again)",
)
def put_provider_key(request: HttpRequest, provider: str, payload: ProviderKeyIn) -> object:
    actions.set_provider_key(provider=provider, key=payload.key, actor=audit.Actor.of(request))
    return next(item for item in keys.status() if item["provider"] == provider)


@router.delete(
    "/settings/provider-keys/{provider}",
    response={204: None},
    tags=["settings"],
    summary="Forget a key set from the console (an environment variable still wins)",
)
def delete_provider_key(request: HttpRequest, provider: str) -> Status[None]:
    actions.forget_provider_key(provider=provider, actor=audit.Actor.of(request))
    return Status(204, None)


@router.get(
    "/settings/compatible-endpoint",
    response=EndpointOut,
    tags=["settings"],
    summary="Where the OpenAI-compatible server answers and the model it serves",
)
def get_endpoint(request: HttpRequest) -> endpoints.Endpoint:
    endpoint = endpoints.get()
    if endpoint is None:
        raise MissionError("No compatible endpoint is set.", code="not_found", status=404)
    return endpoint


@router.put(
    "/settings/compatible-endpoint",
    response=EndpointOut,
    tags=["settings"],
    summary="Set the OpenAI-compatible endpoint (its key, optional, is a provider key)",
)
def put_endpoint(request: HttpRequest, payload: EndpointIn) -> ProviderEndpoint:
    return actions.set_endpoint(
        base_url=payload.base_url,
        model=payload.model,
        context_window=payload.context_window,
        actor=audit.Actor.of(request),
    )


@router.delete(
    "/settings/compatible-endpoint",
    response={204: None},
    tags=["settings"],
    summary="Remove the OpenAI-compatible endpoint",
)
def delete_endpoint(request: HttpRequest) -> Status[None]:
    actions.remove_endpoint(actor=audit.Actor.of(request))
    return Status(204, None)


class WebSearchIn(Schema):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["searxng", "api"] = Field(
        description="searxng: a SearXNG instance's JSON API; api: a search API behind a bridge"
    )
    url: Text = Field(max_length=500, description="e.g. http://127.0.0.1:8888")
    bridge: Text = Field(
        "", max_length=31, description="For `api`: the egress bridge that adds the API's key"
    )


class WebSearchOut(Schema):
    kind: str
    url: str
    bridge: str


class WebSettingsOut(Schema):
    search: WebSearchOut | None = Field(description="Where web_search asks; null: not set")


class WebSettingsIn(Schema):
    model_config = ConfigDict(extra="forbid")

    search: WebSearchIn | None = Field(description="null removes the backend")


def _web_settings() -> dict[str, Any]:
    backend = search.get()
    if backend is None:
        return {"search": None}
    return {"search": {"kind": backend.kind, "url": backend.url, "bridge": backend.bridge}}


@router.get(
    "/settings/web",
    response=WebSettingsOut,
    tags=["settings"],
    summary="The Web tools' settings: the search backend",
)
def get_web_settings(request: HttpRequest) -> dict[str, Any]:
    return _web_settings()


@router.put(
    "/settings/web",
    response=WebSettingsOut,
    tags=["settings"],
    summary="Set the search backend (a SearXNG URL, or a search API's URL and bridge)",
)
def put_web_settings(request: HttpRequest, payload: WebSettingsIn) -> dict[str, Any]:
    actor = audit.Actor.of(request)
    if payload.search is None:
        actions.remove_search_backend(actor=actor)
    else:
        actions.set_search_backend(
            kind=payload.search.kind,
            url=payload.search.url,
            bridge=payload.search.bridge,
            actor=actor,
        )
    return _web_settings()
