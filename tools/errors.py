"""The tools app's owner-facing errors, in one module.

Two kinds of tool errors exist, for two readers:
- `ToolConfigError` (here) is for the **owner**: a tool's configuration, such as a remote's
  credential, is refused or unusable. It is a `DomainError`, answered by `agentos.api` and shown
  by the console; its message says what the owner should fix.
- `tools.base.ToolError` is for the **model**: a tool refused or failed a call (a path out of the
  workspace, a stale edit), and the message goes back to the model as the call's error result.
Do not raise one for the other: an owner's fix is no use to the model, and the model's error
result never reaches the owner's API.
"""

from __future__ import annotations

from agentos.core.errors import DomainError


class ToolConfigError(DomainError):
    """The owner's configuration of a tool (a remote's credential) was refused or cannot be
    used; nothing was written."""
