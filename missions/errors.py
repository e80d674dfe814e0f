"""The missions app's refusals, in one module (as the kernel keeps its own in `kernel.exceptions`).

Raised for the owner's input to missions (a goal, a route, a project, a schedule, a provider key,
a steering message); `agentos.api` answers them as it answers any `DomainError`, and the console
shows their message. API clients read `code` and `status`: keep them stable.
"""

from __future__ import annotations

from agentos.core.errors import DomainError


class MissionError(DomainError):
    """The owner's input to a mission, project, schedule, key or steering was refused; nothing
    was written."""
