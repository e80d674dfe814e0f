"""What an API token may do: the one rule, read by the API's authentication (`agentos.api`), its
OpenAPI document, the Settings screen's help and the refusals' messages (docs/design.md §19).

- `read` reads: every GET of /api/v1, and the event stream.
- `approve` decides what waits on the owner: an approval, a question, an unknown outcome, a skill
  proposal, an MCP server's tools. A phone's token holds `read` + `approve`: it sees what waits
  and decides it, and can start or change nothing.
- `act` starts and steers missions and changes anything else: every other write.

A console session signed in with both factors has every scope. Tokens are managed from a session
only (a leaked token must not mint others): those routes take no token whatever its scopes.
"""

from __future__ import annotations

import re

from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from agentos.core.models import Scope

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# The table: each scope, what it lets a token do (Settings' help, a refusal's message).
LETS = {
    Scope.READ: _("read anything"),
    Scope.ACT: _("start and steer missions, and change anything that is not a decision"),
    Scope.APPROVE: _(
        "decide approvals, answer questions, settle unknown outcomes, approve skills and MCP tools"
    ),
}

# The writes that are an owner's decision, by method and route under /api/v1 (as the OpenAPI
# document writes it): they need `approve`, and `act` is neither needed nor enough. Every other
# write needs `act`. tests/api/test_scopes.py checks each entry names a route, and each route
# answers as this rule says.
DECISIONS = frozenset(
    {
        ("POST", "/approvals/{approval_id}/decision"),
        ("POST", "/questions/{question_id}/answer"),
        ("POST", "/reconciliations/{reconciliation_id}/verdict"),
        ("POST", "/skills/proposals/{proposal_id}/decision"),
        ("POST", "/mcp/servers/{name}/approve"),
        # Trusting a server changes what reaches agents unframed: a decision, like approving.
        ("PATCH", "/mcp/servers/{name}"),
    }
)


def needed(method: str | None, route: str) -> Scope:
    """The scope a token needs for `method` on `route` (e.g. "/runs/{run_id}/pause")."""
    method = (method or "GET").upper()
    if method in SAFE_METHODS:
        return Scope.READ
    if (method, route) in DECISIONS:
        return Scope.APPROVE
    return Scope.ACT


_PARAMETER = re.compile(r"<(?:[^>:]+:)?([^>]+)>")


def route_of(request: HttpRequest, prefix: str) -> str:
    """The route a request resolved to, as `DECISIONS` writes it: Django's matched pattern
    ("api/v1/runs/<run_id>/pause") without `prefix` ("/api/v1/"), parameters in braces."""
    match = request.resolver_match
    pattern = match.route if match is not None else request.path_info.lstrip("/")
    route = pattern.removeprefix(prefix.lstrip("/"))
    return "/" + _PARAMETER.sub(r"{\1}", route).strip("/")


def purpose(scope: Scope) -> str:
    return str(LETS[scope])


def help_text() -> str:
    """The Settings screen's words for the scopes, from the table."""
    each = "; ".join(f"{scope.value}: {purpose(scope)}" for scope in LETS)
    return str(
        _("%(each)s. A phone that approves needs read and approve, not act.") % {"each": each}
    )
