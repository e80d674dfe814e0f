"""A project's frozen environment, as the owner sets and builds it (console and API).

The environment is (setup commands, commit): saving the commands or pressing Rebuild pins the
commit to the project's default branch head (`tools.environments.pin`, resolved in the staging
repository, never from a run) and queues a build on this machine (a huey task) whose outcome the
project shows. Runs mount the version of that pair; a node that lacks it builds it from the same
clean checkout (`cluster.dispatch.ensure_environment`), never from a run's worktree.
"""

from __future__ import annotations

import functools

from django.db import transaction
from django.utils import timezone
from huey.contrib.djhuey import db_task

from agentos.core import audit
from agentos.core.models import AuditEvent
from cluster import environments, sandbox
from cluster.environments import Environment
from cluster.identity import SandboxUnavailable
from missions.errors import MissionError
from missions.models import EnvironmentStatus, Project
from tools import environments as checkouts
from tools.base import ToolError

# Who saved or rebuilt an environment, for the security log: the actor every action takes.
Who = audit.Actor


MAX_SETUP = 20_000  # characters of setup commands
LOG_KEPT = 20_000  # characters of a build's log kept on the project


def of(project_id: int, setup: str, commit: str, repository: str) -> Environment | None:
    """The environment runs of the project mount (None: it has no setup commands); a node
    lacking it builds it in a clean checkout of `commit`."""
    checkout = functools.partial(checkouts.checkout, repository, commit) if repository else None
    return environments.of_project(project_id, setup, commit, checkout)


def of_project(project: Project) -> Environment | None:
    return of(project.pk, project.environment_setup, project.environment_commit, project.repository)


def configure(project: Project, *, setup: str, who: Who) -> Project:
    """The owner's setup commands saved, the commit pinned to the default branch head, a build
    queued; empty commands remove the environment. `MissionError` (422) for commands too long
    or a repository without a commit; nothing is written then."""
    setup = setup.replace("\r\n", "\n").strip()
    if len(setup) > MAX_SETUP:
        raise _invalid("setup", f"Setup commands are at most {MAX_SETUP:,} characters.")
    if "\x00" in setup:
        raise _invalid("setup", "Setup commands cannot contain a NUL character.")
    return _pin(project, setup, who=who, change="saved")


def rebuild(project: Project, *, who: Who) -> Project:
    """The owner's Rebuild: the commit pinned again to the default branch head (a new version
    when it moved) and a build queued. `MissionError` (422) when the project has no setup
    commands or its repository no commit."""
    if not project.environment_setup.strip():
        raise MissionError(
            "This project has no environment setup commands: save some first.",
            code="no_environment_setup",
            status=422,
        )
    return _pin(project, project.environment_setup, who=who, change="rebuilt")


def _pin(project: Project, setup: str, *, who: Who, change: str) -> Project:
    commit = ""
    if setup and project.repository:
        try:
            commit = checkouts.pin(project.repository, f"project-{project.pk}")
        except ToolError as error:
            raise _invalid("repository", str(error)) from None
    version = environments.version_of(setup, commit) if setup else ""
    status = EnvironmentStatus.QUEUED if setup else EnvironmentStatus.NONE
    # Not durable: an API request with an Idempotency-Key runs its view inside a savepoint; the
    # build is queued on the outermost commit all the same.
    with transaction.atomic():
        Project.objects.filter(pk=project.pk).update(
            environment_setup=setup,
            environment_commit=commit,
            environment_version=version,
            environment_status=status,
            environment_log="",
            environment_changed_at=timezone.now(),
        )
        audit.record(
            AuditEvent.Kind.ENVIRONMENT_CHANGED,
            username=who.username,
            address=who.address,
            by=who.by,
            project=project.pk,
            change=change if setup else "removed",
            commit=commit,
            version=version,
        )
        if setup:
            project_id = project.pk
            transaction.on_commit(lambda: build_environment(project_id))
    project.refresh_from_db()
    return project


def build(project_id: int) -> None:
    """The queued build (`build_environment`): the project's current environment
    built on this machine unless it is there, its outcome recorded on the project while the
    project still names that version (a newer save has queued its own build)."""
    project = Project.objects.filter(pk=project_id).first()
    environment = None if project is None else of_project(project)
    if environment is None:
        return
    version = environment.version
    _record(project_id, version, EnvironmentStatus.BUILDING, "")
    try:
        sandbox.build_environment(environment)
    # Any refusal is the build's outcome: a status left at "building" would say nothing.
    except (SandboxUnavailable, ToolError, ValueError, OSError) as error:
        _record(project_id, version, EnvironmentStatus.FAILED, str(error))
        return
    _record(project_id, version, EnvironmentStatus.BUILT, f"{environment.label} is built.")


# The huey task lives beside what it runs, not in `missions.tasks`: the engine's harness reads
# environments here, and the tasks module reaches the launch path through the schedules.
@db_task()  # type: ignore[untyped-decorator]  # huey ships no hints
def build_environment(project_id: int) -> None:
    """Build the project's environment as the owner last pinned it, and record the outcome."""
    build(project_id)


def _record(project_id: int, version: str, status: str, log: str) -> None:
    Project.objects.filter(pk=project_id, environment_version=version).update(
        environment_status=status,
        environment_log=log[-LOG_KEPT:],
        environment_changed_at=timezone.now(),
    )


def _invalid(field: str, message: str) -> MissionError:
    return MissionError(
        f"The environment is not valid: {field}: {message}",
        code="invalid_input",
        status=422,
        details={"fields": {field: [message]}},
    )
