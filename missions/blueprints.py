"""Mission templates: what a schedule, a webhook or the API starts a mission from.

One schema (`MissionIn`, the body of POST /api/v1/missions) says what a mission may be given; a
template is that body stored as JSON. `clean` checks one before it is stored, `start` turns one
into a mission through `missions.launch.create_mission`, the one pipeline every trigger shares
(docs/design.md §12). Text from outside (a webhook's payload) never joins the template: it comes
as a `launch.Brief`, data after the goal.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from ninja import Field, Schema
from pydantic import ConfigDict, StrictInt, model_validator

from agentos.core.schemas import Text
from kernel.models import Run
from missions import launch, profiles
from missions.errors import MissionError
from missions.launch import Brief
from missions.models import Mission, Project

INT32 = 2**31 - 1
INT64 = 2**63 - 1

# Role's values, spelled out for the schema (a test keeps the two equal).
RoleName = Literal["planner", "executor", "evaluator", "memory_consolidator", "classifier"]


class CapsIn(Schema):
    """Caps over every run of the mission; null means none, and an absent spend, token or
    wall-time cap is the owner's default (GET /settings/budget)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: StrictInt | None = Field(None, ge=0, le=INT64)
    max_usd_micros: StrictInt | None = Field(None, ge=0, le=INT64, description="Micro-dollars")
    max_turns: StrictInt | None = Field(None, ge=0, le=INT32)
    max_tool_calls: StrictInt | None = Field(None, ge=0, le=INT32)
    max_seconds: StrictInt | None = Field(
        None, ge=0, le=INT32, description="Wall time of each of its root runs, from its start"
    )
    max_concurrent_runs: StrictInt | None = Field(None, ge=1, le=32_767, description="Default 12")


class RouteIn(Schema):
    model_config = ConfigDict(extra="forbid")

    provider: Literal["anthropic", "openai", "compatible", "scripted"]
    model: Text = Field(min_length=1, max_length=100)
    effort: Literal["low", "medium", "high"] | None = None


# The offline missions' keys, spelled out for the schema (a test keeps them equal).
OfflineKey = Literal["run-tests", "survey", "demo"]


class MissionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    project_id: int
    goal: Text = Field(
        "", max_length=launch.MAX_GOAL, description="Required, unless `offline` is given"
    )
    definition_of_done: Text = Field("", max_length=launch.MAX_GOAL)
    # Checked by the service (400 `invalid_criteria`, naming the criterion and what is wrong),
    # as from the console or another agent: the schema only says it is a list.
    criteria: list[Any] | None = Field(
        None,
        description="The definition of done as criteria, written before the work:"
        ' [{"id": "tests", "description": "...", "oracle": {"command": "<shell command>"} or'
        ' {"evaluator": true}, "passes": false}]. The mission ends done only when each passes'
        " (a command exits 0 in its workspace; an independent evaluator cites evidence).",
    )
    risk_class: Literal["research", "code", "untrusted"] = Field(
        "code",
        description="How closely the mission's agents are confined (its sandbox level):"
        " research = read-only tools, no commands (0); code = commands in a sandbox on the"
        " mission's worktree (1); untrusted = each command in a disposable virtual machine (2)",
    )
    caps: CapsIn | None = None
    mcp_servers: list[str] = Field(
        default_factory=list,
        description="MCP servers its agents may use besides its project's (registered, approved)",
    )
    routes: dict[RoleName, RouteIn] = Field(
        default_factory=dict, description="Per-role overrides of the default model routes"
    )
    bridges: list[str] = Field(
        default_factory=list,
        description="API bridges its sandboxes may call (the owner's, or anthropic, openai, git):"
        " http://<name>.bridge/... inside the sandbox, the credential added outside it",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Extra hosts its sandboxes may reach: host or host:port, globs allowed",
    )
    sensitive: bool = Field(
        False, description="Plan, then execute: the plan is fixed before any untrusted content"
    )
    profile: Text | None = Field(
        None,
        max_length=40,
        description="A domain profile's name (GET /api/v1/profiles): its routes, tools, sandbox"
        " level (the higher of its and the risk class's), criteria (when none are given) and caps"
        " (those not given) apply",
    )
    offline: OfflineKey | None = Field(
        None,
        description="An offline mission, played on the project's repository without any model"
        " key: run-tests (run the tests and report what fails), survey (survey the repository)."
        " It has its own goal and model: leave goal, definition_of_done and routes out.",
    )

    @model_validator(mode="after")
    def _goal_or_offline(self) -> MissionIn:
        # Refused with the schema's errors (422), as a missing goal always was.
        if self.offline is None and "goal" not in self.model_fields_set:
            raise ValueError("goal is required unless offline is given")
        return self


def clean(data: Any) -> dict[str, Any]:
    """A template as stored: `data` checked against the schema and its project's existence,
    with only the fields it sets (422 `invalid_input` naming each wrong field otherwise)."""
    spec = _parse(data)
    if not Project.objects.filter(pk=spec.project_id).exists():
        raise MissionError(
            f"No project {spec.project_id}.",
            code="invalid_input",
            status=422,
            details={"fields": {"project_id": [f"No project {spec.project_id}."]}},
        )
    if spec.profile is not None:
        profiles.get(spec.profile)  # 422 naming the known ones
    return spec.model_dump(mode="json", exclude_unset=True)


def start(
    template: MissionIn | dict[str, Any], *, trigger: str, brief: Brief | None = None
) -> tuple[Mission, Run]:
    """A mission and its root run from a template, or neither (`launch.create_mission`)."""
    spec = template if isinstance(template, MissionIn) else _parse(template)
    project = Project.objects.filter(pk=spec.project_id).first()
    if project is None:
        raise MissionError(f"No project {spec.project_id}.", code="not_found", status=404)
    return launch.create_mission(
        project=project,
        goal=spec.goal,
        definition_of_done=spec.definition_of_done,
        caps=spec.caps.model_dump(exclude_unset=True) if spec.caps else {},
        routes={role: route.model_dump() for role, route in spec.routes.items()},
        trigger=trigger,
        offline=spec.offline,
        criteria=spec.criteria,
        risk_class=spec.risk_class,
        mcp_servers=spec.mcp_servers,
        bridges=spec.bridges,
        allowed_hosts=spec.allowed_hosts,
        sensitive=spec.sensitive,
        brief=brief,
        profile=spec.profile,
    )


def _parse(data: Any) -> MissionIn:
    try:
        return MissionIn.model_validate(data)
    except pydantic.ValidationError as error:
        fields: dict[str, list[str]] = {}
        for problem in error.errors():
            where = ".".join(str(part) for part in problem["loc"]) or "mission"
            fields.setdefault(where, []).append(problem["msg"])
        raise MissionError(
            "The mission is not valid: "
            + "; ".join(f"{where}: {' '.join(said)}" for where, said in fields.items()),
            code="invalid_input",
            status=422,
            details={"fields": fields},
        ) from None
