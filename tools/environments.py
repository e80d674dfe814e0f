"""Where a project's environment is built (`cluster.environments`): a clean checkout of the
project's repository at the commit the owner pinned, made for one build and removed after it.

It is made as a run's repository is made (`tools.workspace.ensure_worktree`): a fresh `git init`
in a directory nobody else touched, a fetch of the commit from the staging repository, then the
checkout by git inside the sandbox, as the build user (`cluster.identity.builder`). It lives in
a directory of its own, outside every run's worktree: no file a run wrote is in it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from cluster.identity import SandboxUnavailable, give
from cluster.sandbox import Limits, run_as_builder
from tools import workspace
from tools.base import ToolError

BRANCH = "agentos/environment"


def pinned_ref(name: str) -> str:
    """Where the staging repository keeps the commit environment `name` is pinned to."""
    return f"refs/agentos/environments/{name}"


def pin(repository: str, name: str) -> str:
    """Pin environment `name` to the project's default branch head; its commit."""
    return workspace.pin_project_head(repository, pinned_ref(name))


@contextlib.contextmanager
def checkout(repository: str, commit: str) -> Iterator[Path]:
    """A clean checkout of `commit` of the project at `repository`, the build user's, removed on
    leaving. Raises `SandboxUnavailable` saying why it cannot be made (the command that needed
    the environment is then refused with it)."""
    if not commit:
        raise SandboxUnavailable(
            "the project's environment is pinned to no commit: the owner rebuilds it (Rebuild"
            " environment, on the project's page)"
        )
    folder = workspace.root() / "environment-builds"
    workspace.make_dirs(folder, 0o711 if os.geteuid() == 0 else 0o700)
    path = folder / uuid.uuid4().hex
    path.mkdir(mode=0o700)
    try:
        try:
            stage = workspace.staging(repository)
            workspace.host_git(path, "init", "--quiet", "--initial-branch", BRANCH)
            workspace.host_git(path, "fetch", "--quiet", "--no-tags", str(stage), commit)
            workspace.host_git(path, "update-ref", f"refs/heads/{BRANCH}", commit)
        except ToolError as error:
            raise SandboxUnavailable(
                f"cannot make the checkout of {commit[:12]} to build the environment in: {error}"
            ) from None
        give(path, build=True)
        _check_out(path)
        yield path
    finally:
        # rm, not shutil.rmtree: whatever the setup left (deep trees, read-only directories).
        subprocess.run(  # noqa: S603  # fixed program, a path of ours
            ["/bin/rm", "-rf", "--one-file-system", "--", str(path)], check=False
        )


def _check_out(path: Path) -> None:
    done = run_as_builder(
        ["git", "reset", "--hard", "--quiet", "HEAD"],
        workdir=path,
        git_writable=True,
        limits=Limits(wall_seconds=workspace.GIT_TIMEOUT),
    )
    if done.exit_code != 0:
        raise SandboxUnavailable(
            f"cannot check out the environment's commit: {done.summary().strip()}"
        )
