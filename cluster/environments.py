"""A project's frozen environment: its toolchain and installed packages, built once per version
on each node that needs it (`build_environment`, run in the sandbox with /env writable, then
frozen read-only) and shown read-only at /env to every command of the project's runs.

The version is the digest of the setup commands: the same commands reuse the snapshot, changed
ones build a new version beside it; swapping the runner's code never touches either."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

SETUP_SECONDS = 1800.0  # installing a toolchain may take a while; a command's clock is its own


@dataclass(frozen=True)
class Environment:
    name: str  # a file name on the node: letters, digits, dots, dashes
    setup: str  # shell commands that fill /env

    @property
    def version(self) -> str:
        return hashlib.sha256(self.setup.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """How a runner reports it in a result (`name@version`)."""
        return f"{self.name}@{self.version}"


def of_project(project_id: int, setup: str) -> Environment | None:
    """The environment of a project whose setup commands are `setup` (None when it has none)."""
    return Environment(f"project-{project_id}", setup.strip()) if setup.strip() else None
