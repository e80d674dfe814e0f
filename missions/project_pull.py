"""Pull from remote, the owner's action on a project: its repository brought up to its remote.

A project on this machine has its checked-out branch fast-forwarded (`tools.pulling`: host git
that interprets nothing an agent wrote); a project cloned from a URL, a bare copy of ours, is
updated as `projects.refresh` does. Called alike by the project page and
POST /api/v1/projects/{id}/pull.
"""

from __future__ import annotations

import logging
from pathlib import Path

from missions import projects
from missions.errors import MissionError
from missions.models import Project
from tools import pulling
from tools.base import ToolError

logger = logging.getLogger(__name__)


def pull(project: Project) -> pulling.Pulled | None:
    """What moved (None for a cloned project, whose branches all follow the remote), or
    `MissionError`: 409 when the repository cannot be fast-forwarded, 502 when its remote
    cannot be reached; nothing changed then."""
    if not project.repository:
        raise MissionError(
            "This project has no repository to pull into.", code="no_repository", status=409
        )
    if project.clone_url:
        projects.refresh(project)
        return None
    try:
        pulled = pulling.fast_forward(Path(project.repository), project_id=project.pk)
    except pulling.PullRefused as refused:
        raise MissionError(str(refused), code="not_fast_forward", status=409) from None
    except ToolError as error:
        raise MissionError(str(error), code="remote_unreachable", status=502) from None
    logger.info(
        "project %s pulled: %s %s..%s", project.pk, pulled.branch, pulled.before, pulled.after
    )
    return pulled
