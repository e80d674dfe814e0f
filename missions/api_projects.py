"""Projects and their frozen environments over /api/v1: added from a path or a clone URL
(`missions.projects`), updated from their remote, and their environment set, shown and rebuilt
(`missions.environments`). Refusals are `MissionError`s, mapped to the API's error shape in
`agentos.api`; nothing is written when one is raised."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from agentos.core import audit
from agentos.core.schemas import Text
from missions import environments as project_environments
from missions import launch, project_pull, project_settings, projects
from missions.api import project_or_404
from missions.models import Project

router = Router()


INSTRUCTIONS = "The owner's instructions, in the system prompt of every run of the project"
CRITERIA = "Criteria a mission that gives none is held to (as a mission's criteria)"
SMOKE = "Run in the sandbox at each run's start and resume; else the worktree's init.sh"


class CredentialIn(Schema):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["token", "ssh_key"]
    secret: str = Field(min_length=1, max_length=20_000)
    username: Text = Field("", max_length=200, description="For a token; x-access-token if empty")


class ProjectIn(Schema):
    model_config = ConfigDict(extra="forbid")

    name: Text = Field(max_length=120)
    description: Text = Field("", max_length=20_000)
    repository: Text = Field("", max_length=500, description="Absolute path of a git repository")
    clone_url: Text = Field(
        "",
        max_length=500,
        description="Or a remote to clone: https://host/path, ssh://user@host/path, user@host:path",
    )
    credential: CredentialIn | None = Field(
        None, description="What the remote asks for; kept encrypted, never shown again"
    )
    mcp_servers: list[str] = Field(
        default_factory=list, description="MCP servers every mission of it may use (approved)"
    )
    instructions: str = Field("", description=INSTRUCTIONS)
    default_criteria: list[dict[str, Any]] = Field(default_factory=list, description=CRITERIA)
    smoke_command: str = Field("", description=SMOKE)


class ProjectOut(Schema):
    id: int
    name: str
    description: str
    repository: str
    clone_url: str
    mcp_servers: list[str]
    instructions: str
    instructions_from: str = Field(description="The file and commit imported; empty: typed")
    default_criteria: list[dict[str, Any]]
    smoke_command: str
    created_at: datetime


@router.get("/projects", response=list[ProjectOut], tags=["projects"], summary="Projects by name")
def list_projects(request: HttpRequest) -> list[Project]:
    return list(Project.objects.all())


@router.post(
    "/projects",
    response={201: ProjectOut},
    tags=["projects"],
    summary="Create a project from a local git repository or a clone URL",
)
def create_project(request: HttpRequest, payload: ProjectIn) -> Status[Project]:
    credential = payload.credential
    # Checked before anything is made: a refused setting leaves no project (nor clone) behind.
    settings = project_settings.validate(
        has_repository=bool(payload.repository or payload.clone_url),
        instructions=payload.instructions,
        default_criteria=payload.default_criteria,
        smoke_command=payload.smoke_command,
    )
    project = projects.create_project(
        name=payload.name,
        description=payload.description,
        repository=payload.repository,
        clone_url=payload.clone_url,
        credential=projects.Credential(**credential.dict()) if credential else None,
        mcp_servers=launch.mcp_server_names(payload.mcp_servers),
    )
    project = project_settings.save(project, settings, who=audit.Actor.of(request))
    return Status(201, project)


class ProjectPatch(Schema):
    model_config = ConfigDict(extra="forbid")

    instructions: str | None = Field(None, description=INSTRUCTIONS)
    default_criteria: list[Any] | None = Field(None, description=CRITERIA + "; [] for none")
    smoke_command: str | None = Field(None, description=SMOKE + "; empty for init.sh")


@router.patch(
    "/projects/{project_id}",
    response=ProjectOut,
    tags=["projects"],
    summary="Change a project's instructions, default criteria or smoke command",
)
def patch_project(request: HttpRequest, project_id: int, payload: ProjectPatch) -> Project:
    given = payload.model_dump(exclude_unset=True)
    unset = project_settings.UNSET
    return project_settings.configure(
        project_or_404(project_id),
        who=audit.Actor.of(request),
        instructions=(given["instructions"] or "") if "instructions" in given else unset,
        default_criteria=given.get("default_criteria", unset),
        smoke_command=(given["smoke_command"] or "") if "smoke_command" in given else unset,
    )


@router.post(
    "/projects/{project_id}/instructions/import",
    response=ProjectOut,
    tags=["projects"],
    summary="Set a project's instructions to its AGENTS.md (else CLAUDE.md) at the default"
    " branch head",
)
def import_instructions(request: HttpRequest, project_id: int) -> Project:
    return project_settings.import_instructions(
        project_or_404(project_id), who=audit.Actor.of(request)
    )


@router.post(
    "/projects/{project_id}/refresh",
    response=ProjectOut,
    tags=["projects"],
    summary="Update a cloned project's repository from its remote",
)
def refresh_project(request: HttpRequest, project_id: int) -> Project:
    project = project_or_404(project_id)
    projects.refresh(project)
    return project


class PullOut(Schema):
    project: ProjectOut
    branch: str | None = Field(description="The branch fast-forwarded; null for a cloned project")
    remote: str | None
    before: str | None = Field(description="Its commit before the pull")
    after: str | None = Field(description="Its commit after: equal to before when up to date")
    moved: bool | None = Field(description="Whether it moved; null for a cloned project")


@router.post(
    "/projects/{project_id}/pull",
    response=PullOut,
    tags=["projects"],
    summary="Pull from remote: fast-forward the checked-out branch of the project's repository"
    " (a cloned project: update it from its remote)",
)
def pull_project(request: HttpRequest, project_id: int) -> dict[str, Any]:
    project = project_or_404(project_id)
    pulled = project_pull.pull(project)
    if pulled is None:
        return {"project": project}
    return {
        "project": project,
        "branch": pulled.branch,
        "remote": pulled.remote,
        "before": pulled.before,
        "after": pulled.after,
        "moved": pulled.moved,
    }


@router.get("/projects/{project_id}", response=ProjectOut, tags=["projects"], summary="A project")
def get_project(request: HttpRequest, project_id: int) -> Project:
    return project_or_404(project_id)


class EnvironmentIn(Schema):
    model_config = ConfigDict(extra="forbid")

    setup: str = Field(
        max_length=project_environments.MAX_SETUP,
        description="Shell commands that fill /env; empty removes the environment",
    )


class EnvironmentOut(Schema):
    setup: str = Field(alias="environment_setup")
    commit: str = Field(alias="environment_commit", description="What the setup runs on")
    version: str = Field(alias="environment_version", description="Of (setup, commit)")
    status: str = Field(alias="environment_status")
    log: str = Field(alias="environment_log")
    changed_at: datetime | None = Field(alias="environment_changed_at")


@router.get(
    "/projects/{project_id}/environment",
    response=EnvironmentOut,
    tags=["projects"],
    summary="A project's environment: setup commands, pinned commit, version and last build",
)
def get_environment(request: HttpRequest, project_id: int) -> Project:
    return project_or_404(project_id)


@router.put(
    "/projects/{project_id}/environment",
    response={202: EnvironmentOut},
    tags=["projects"],
    summary="Set a project's environment setup commands; pins the default branch head, builds",
)
def put_environment(
    request: HttpRequest, project_id: int, payload: EnvironmentIn
) -> Status[Project]:
    project = project_environments.configure(
        project_or_404(project_id), setup=payload.setup, who=project_environments.Who.of(request)
    )
    return Status(202, project)


@router.post(
    "/projects/{project_id}/environment/rebuild",
    response={202: EnvironmentOut},
    tags=["projects"],
    summary="Rebuild a project's environment on its default branch head, as it is now",
)
def rebuild_environment(request: HttpRequest, project_id: int) -> Status[Project]:
    project = project_environments.rebuild(
        project_or_404(project_id), who=project_environments.Who.of(request)
    )
    return Status(202, project)
