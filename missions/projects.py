"""Projects: created by the owner (console or API), validated as the admin validates them.

A project's repository is a git repository on this machine, given by its path, or cloned from a
URL (with the credential the remote asks for, kept encrypted in the control plane and used for
that project's fetches and pushes only).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from missions.errors import MissionError
from missions.models import Project
from tools import remotes, workspace
from tools.base import ToolError
from tools.errors import ToolConfigError
from tools.models import CredentialKind


@dataclass(frozen=True)
class Credential:
    """What a remote asks for: a token over HTTPS (with its user name) or an SSH private key."""

    kind: str
    secret: str
    username: str = ""


def create_project(
    *,
    name: str,
    description: str = "",
    repository: str = "",
    clone_url: str = "",
    credential: Credential | None = None,
    mcp_servers: list[str] | None = None,
) -> Project:
    """A new project, or `MissionError` (422) naming each invalid field: a name already taken,
    a repository that is not an absolute path to a git repository, a clone URL that is not a
    remote's or that cannot be cloned (the remote's answer, without the credential)."""
    project = Project(name=name.strip(), description=description.strip(), repository=repository)
    project.mcp_servers = list(mcp_servers or [])  # checked by the caller (`launch`)
    project.repository = project.repository.strip()
    clone_url = clone_url.strip()
    if clone_url and project.repository:
        raise _invalid({"clone_url": ["Give a local path or a clone URL, not both."]})
    if credential is not None and not clone_url:
        raise _invalid({"credential": ["A credential goes with a clone URL."]})
    try:
        project.full_clean()
    except ValidationError as error:
        raise _invalid(error.message_dict) from error
    if clone_url:
        _check_credential(credential)
        project.clone_url = _checked_url(clone_url)
        project.repository = str(_clone(project.clone_url, credential))
    try:
        with transaction.atomic():
            project.save()
            if credential is not None:
                remotes.put(
                    project_id=project.pk,
                    remote="origin",
                    kind=credential.kind,
                    secret=credential.secret,
                    username=credential.username,
                )
    except IntegrityError as error:  # the same name, created between the check and the insert
        _forget_clone(project)
        raise _invalid({"name": ["A project with this name already exists."]}) from error
    except BaseException:
        _forget_clone(project)
        raise
    return project


def refresh(project: Project) -> None:
    """A cloned project's repository brought up to its remote, or `MissionError` (502) with the
    remote's answer."""
    if not project.clone_url:
        raise MissionError(
            "This project's repository is on this machine: it has no remote to update from.",
            code="not_cloned",
            status=409,
        )
    with remotes.credentials(project.pk, "origin", project.clone_url) as auth:
        try:
            workspace.refresh(Path(project.repository), auth.env)
        except ToolError as error:
            raise MissionError(
                f"Cannot update from {project.clone_url}: {auth.scrub(str(error))}",
                code="remote_unreachable",
                status=502,
            ) from None


def _clone(url: str, credential: Credential | None) -> Path:
    auth_of = (
        remotes.given(
            kind=credential.kind, secret=credential.secret, username=credential.username, url=url
        )
        if credential is not None
        else contextlib.nullcontext(remotes.Auth())
    )
    with auth_of as auth:
        try:
            return workspace.clone(url, auth.env)
        except ToolError as error:
            raise _invalid({"clone_url": [f"Cannot clone it: {auth.scrub(str(error))}"]}) from None


def _checked_url(url: str) -> str:
    try:
        return remotes.check_url(url)
    except ToolConfigError as error:
        raise _invalid({"clone_url": [error.message]}) from None


def _check_credential(credential: Credential | None) -> None:
    if credential is None:
        return
    if credential.kind not in CredentialKind.values:
        raise _invalid({"credential": [f"Unknown credential kind {credential.kind!r}."]})
    if not credential.secret.strip() or len(credential.secret) > 20_000:
        raise _invalid({"credential": ["A credential is 1 to 20,000 characters."]})


def _forget_clone(project: Project) -> None:
    if project.clone_url and project.repository:
        workspace.remove(Path(project.repository))


def _invalid(fields: dict[str, list[str]]) -> MissionError:
    return MissionError(
        "The project is not valid: "
        + "; ".join(f"{field}: {' '.join(messages)}" for field, messages in fields.items()),
        code="invalid_input",
        status=422,
        details={"fields": fields},
    )
