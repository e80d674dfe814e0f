"""Which model a run uses: per-role defaults, overridden per mission, fixed for the run.

Rules (docs/design.md §12): the model is fixed **per run** — changing model means delegating to a
sub-agent; effort is the first cost lever; failover to the other provider happens only at a
sub-agent boundary (a new child run), never inside a running conversation, whose transcript is
in one provider's native format. Without the provider's API key, the offline scripted model
stands in, and says so; the OpenAI-compatible endpoint (`compatible`) is routable like the two
others once its base URL and model are set (its key is optional).
"""

from __future__ import annotations

from dataclasses import dataclass

from missions.errors import MissionError
from missions.models import Mission, Role, RoleRoute
from missions.providers.registry import endpoint, ready

# The compatible endpoint has no partner: an owner-run model failing is not a cloud at capacity,
# and a cloud model is never chosen behind the owner's back to replace a local one.
OTHER_PROVIDER = {"anthropic": "openai", "openai": "anthropic"}
COMPATIBLE = "compatible"


@dataclass(frozen=True)
class Route:
    provider: str
    model: str
    effort: str | None
    scripted_stand_in: bool = False  # the configured provider has no key: offline model used


def route_for(mission: Mission, role: str) -> Route:
    """The mission's override for `role`, else the role's default; scripted when the route's
    provider cannot be called (no key; for the compatible endpoint, no base URL and model)."""
    route = configured_route(mission, role)
    if not ready(route.provider):
        return Route("scripted", "scripted", None, scripted_stand_in=True)
    return route


def configured_route(mission: Mission, role: str) -> Route:
    """The route `role` is configured with, whether or not its provider can be called now (a
    sub-agent's boundary may fail over from it: `failover_for`)."""
    if role not in Role.values:
        raise MissionError(f"Unknown role {role!r}; roles: {', '.join(Role.values)}.")
    override = mission.routes.get(role) if isinstance(mission.routes, dict) else None
    if override:
        route = Route(override["provider"], override["model"], override.get("effort") or None)
    else:
        default = default_route(role)
        if default is None:
            raise MissionError(f"No route for role {role!r}: set one in the admin.")
        route = default
    return route


def default_route(role: str) -> Route | None:
    """The route of a role no mission overrides: its default (`RoleRoute`), unless that
    default's provider cannot be called and the owner's compatible endpoint can — then the
    endpoint's model. Setting the endpoint in Settings is then enough to run a goal; an owner
    with a cloud key keeps the cloud defaults, and a route a mission names is never replaced."""
    stored = RoleRoute.objects.filter(role=role).first()
    route = Route(stored.provider, stored.model, stored.effort or None) if stored else None
    if route is not None and (route.provider == "scripted" or ready(route.provider)):
        return route
    served = endpoint(COMPATIBLE)
    if served is None:
        return route
    return Route(COMPATIBLE, served.model, route.effort if route else None)


def failover_for(route: Route) -> Route | None:
    """The route a *new child run* may take when `route`'s provider is down or rate-limited.

    Only at a sub-agent boundary: the caller spawns a child with this route; a running
    conversation is never moved to another provider.
    """
    other = OTHER_PROVIDER.get(route.provider)
    if other is None or not ready(other):
        return None
    default = RoleRoute.objects.filter(provider=other).order_by("role").first()
    return Route(other, default.model, route.effort) if default else None
