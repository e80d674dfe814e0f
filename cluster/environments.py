"""A project's frozen environment: its toolchain and installed packages, built once per version
on each node that needs it (`build_environment`, run in the sandbox with /env writable, then
frozen read-only) and shown read-only at /env to every command of the project's runs.

The setup commands run in a clean checkout of the project's repository at the commit the owner
pinned (`commit`), made for the build and removed after it (`checkout`), as the build user
(`cluster.identity.builder`), without network: never in a run's worktree, as a run's uid or with
a run's egress, so nothing a run wrote reaches the environment every later run mounts.

The version is the digest of (setup commands, commit): the same pair reuses the snapshot, a
changed one builds a new version beside it; swapping the runner's code never touches either."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

SETUP_SECONDS = 1800.0  # installing a toolchain may take a while; a command's clock is its own

# Makes the directory the setup commands run in (a clean checkout), removed on leaving.
Checkout = Callable[[], AbstractContextManager[Path]]


@dataclass(frozen=True)
class Environment:
    name: str  # a file name on the node: letters, digits, dots, dashes
    setup: str  # shell commands that fill /env
    commit: str = ""  # the project's commit they run on ("" for a project without repository)
    # Who makes its clean checkout (`tools.environments`); None: an empty directory.
    checkout: Checkout | None = field(default=None, compare=False, repr=False)

    @property
    def version(self) -> str:
        return version_of(self.setup, self.commit)

    @property
    def label(self) -> str:
        """How a runner reports it in a result (`name@version`)."""
        return f"{self.name}@{self.version}"


def version_of(setup: str, commit: str) -> str:
    """The version of (setup commands, commit): a length prefix keeps the pair unambiguous."""
    text = f"{len(setup)}:{setup}\n{commit}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def of_project(
    project_id: int, setup: str, commit: str = "", checkout: Checkout | None = None
) -> Environment | None:
    """The environment of a project whose setup commands are `setup`, pinned to `commit`
    (None when it has no setup commands)."""
    if not setup.strip():
        return None
    return Environment(f"project-{project_id}", setup.strip(), commit, checkout)
