"""The approvals app's refusals, in one module (as the kernel keeps its own in `kernel.exceptions`).

Raised for a decision, an answer or a verdict the service refuses; the kernel's own refusals of a
wait (already settled, expired) stay `KernelError`s. Both are `DomainError`s, answered by
`agentos.api` and shown by the console: API clients read `code` and `status`, keep them stable.
"""

from __future__ import annotations

from agentos.core.errors import DomainError


class ApprovalError(DomainError):
    """An owner's decision, answer or verdict was refused (unknown id, a hash that does not
    match, an empty answer...); nothing was recorded."""
