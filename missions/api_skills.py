"""Skills over /api/v1/skills: what runs are offered, the proposals waiting for the owner, the
owner's imports (a local folder or an http(s) URL) and decisions on proposals.

What it calls is memory's (`memory.skills`, `memory.skill_proposals`); the router sits in the
missions layer because `?project=` reads a project's repository. An import is a proposal: it
enters memory's `skills` scope, and runs are offered it, only once the owner approves it on its
diff with `POST /skills/proposals/{id}/decision`. Refusals are `MemoryRefused` errors (400
malformed, 404 unknown), shaped as every API error in `agentos.api`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, StrictBool

from agentos.core import audit
from agentos.core.schemas import Text
from memory import skill_proposals, skills
from memory.errors import MemoryRefused, not_found
from missions.models import Project

router = Router(tags=["skills"])


class SkillOut(Schema):
    name: str
    description: str
    source: str = Field(description="'memory' (approved by the owner) or 'repository'")
    commit: str = Field(description="The commit of the scope or of the project it was read at")
    path: str = Field(description="The skill's folder in that repository")


class ProposalOut(Schema):
    id: str = Field(description="<name>-<digest of its files>: what a decision names")
    name: str
    description: str
    author: str = Field(description="'owner', or the run that proposed it ('run:<id>')")
    source: str = Field(description="The folder or URL it was imported from, or the run")
    diff: str = Field(description="Against the skill as approved now")
    files: list[str]
    created_at: datetime


class SkillsOut(Schema):
    skills: list[SkillOut] = Field(description="Approved skills of memory's skills scope")
    proposals: list[ProposalOut] = Field(description="Proposals waiting for the owner")
    repository: list[SkillOut] = Field(description="The project's repository's (with ?project=)")
    problems: list[str] = Field(description="Skills left out, and why")


class SkillsQuery(Schema):
    project: int | None = Field(None, ge=1, description="Also this project's repository skills")


class ImportIn(Schema):
    model_config = ConfigDict(extra="forbid")

    path: Text = Field("", max_length=4096, description="A skill's folder on this machine")
    url: Text = Field("", max_length=4096, description="An http(s) URL of a SKILL.md")


class DecisionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    approve: StrictBool


class DecisionOut(ProposalOut):
    status: str = Field(description="'approved' or 'refused'")


def proposal_out(proposal: skill_proposals.Proposal) -> dict[str, Any]:
    return {
        "id": proposal.id,
        "name": proposal.name,
        "description": proposal.description,
        "author": proposal.author,
        "source": proposal.source,
        "diff": proposal.diff,
        "files": proposal.files,
        "created_at": proposal.created_at,
    }


@router.get(
    "/skills",
    response=SkillsOut,
    summary="Approved skills, proposals waiting for the owner, and (with ?project=) the"
    " project's repository's skills",
)
def list_skills(request: HttpRequest, filters: Query[SkillsQuery]) -> dict[str, Any]:
    approved, problems = skills.from_memory()
    found: list[dict[str, Any]] = []
    if filters.project is not None:
        project = Project.objects.filter(pk=filters.project).first()
        if project is None:
            raise not_found(f"No project {filters.project}.")
        if project.repository:
            _commit, found, more = skills.from_repository(project.repository)
            problems += more
    return {
        "skills": approved,
        "proposals": [proposal_out(p) for p in skill_proposals.pending()],
        "repository": found,
        "problems": problems,
    }


@router.post(
    "/skills/import",
    response={201: ProposalOut},
    summary="Import a skill from a folder on this machine or an http(s) URL of a SKILL.md: a"
    " proposal, offered to runs once the owner approves it",
)
def import_skill(request: HttpRequest, payload: ImportIn) -> Status[dict[str, Any]]:
    try:
        proposal = skill_proposals.import_skill(
            path=payload.path, url=payload.url, actor=audit.Actor.of(request)
        )
    except skills.SkillError as error:
        raise MemoryRefused(str(error)) from None
    return Status(201, proposal_out(proposal))


@router.post(
    "/skills/proposals/{proposal_id}/decision",
    response=DecisionOut,
    summary="Approve (its files become the skill runs are offered) or refuse a skill proposal",
)
def decide(request: HttpRequest, proposal_id: str, payload: DecisionIn) -> dict[str, Any]:
    # An owner's decision, as an approval's: a token needs `approve` (agentos.core.scopes).
    try:
        proposal = skill_proposals.decide(
            proposal_id, approve=payload.approve, actor=audit.Actor.of(request)
        )
    except skill_proposals.Missing as error:
        raise not_found(str(error)) from None
    except skills.SkillError as error:
        raise MemoryRefused(str(error)) from None
    return {**proposal_out(proposal), "status": "approved" if payload.approve else "refused"}
