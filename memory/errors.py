"""The memory app's refusals of the owner's input (a scope, a note's path, a note, a reason), in
one module as `missions.errors` keeps the missions'.

`agentos.api` answers them as it answers any `DomainError`; the console shows their message.
API clients read `code` and `status`: keep them stable.
"""

from __future__ import annotations

from agentos.core.errors import DomainError


class MemoryRefused(DomainError):
    """The owner's request about memory was refused; nothing was written."""


def not_found(message: str) -> MemoryRefused:
    return MemoryRefused(message, code="not_found", status=404)


def conflict(message: str) -> MemoryRefused:
    return MemoryRefused(message, code="conflict", status=409)
