"""The console's shell, which every app's screens use: the screens in navigation order, the
guard that lets only the owner in (password and second factor), and the signed-in owner. It
imports no app, so each app's views can import it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext_lazy

from agentos.core import audit, owner, security_settings
from agentos.core.models import AuditEvent


@dataclass(frozen=True)
class Screen:
    slug: str
    title: Any
    summary: Any

    @property
    def url(self) -> str:
        """The screen's page: its URL is named after its slug."""
        return reverse(f"console:{self.slug}")


# The console's screens, in navigation order (docs/design.md §21).
SCREENS = [
    Screen("home", gettext_lazy("Home"), gettext_lazy("What waits for you, and health.")),
    Screen(
        "missions",
        gettext_lazy("Missions"),
        gettext_lazy("Goals, definitions of done and live run trees."),
    ),
    Screen(
        "approvals",
        gettext_lazy("Approvals"),
        gettext_lazy("Exact actions waiting for your decision."),
    ),
    Screen(
        "projects",
        gettext_lazy("Projects"),
        gettext_lazy("Repositories and their missions."),
    ),
    Screen(
        "schedules",
        gettext_lazy("Schedules"),
        gettext_lazy("Missions that start by the clock, and their history."),
    ),
    Screen(
        "memory",
        gettext_lazy("Memory"),
        gettext_lazy("Notes, proposals, history and invalidations."),
    ),
    Screen(
        "agents",
        gettext_lazy("Agents & policies"),
        gettext_lazy("Roles, routing and permission policies."),
    ),
    Screen(
        "tools",
        gettext_lazy("Tools"),
        gettext_lazy("What each tool does, and your permission rules."),
    ),
    Screen(
        "cluster",
        gettext_lazy("Cluster"),
        gettext_lazy("Nodes, runners and active sandboxes."),
    ),
    Screen(
        "webhooks",
        gettext_lazy("Webhooks"),
        gettext_lazy("Missions started by signed requests from outside."),
    ),
    Screen("costs", gettext_lazy("Costs"), gettext_lazy("Spend per mission, model and day.")),
    Screen("settings", gettext_lazy("Settings"), gettext_lazy("Security and API tokens.")),
]
SCREENS_BY_SLUG = {screen.slug: screen for screen in SCREENS}
TABS = ["home", "missions", "approvals", "settings"]


def console_context(request: HttpRequest) -> dict[str, Any]:
    return {"tabs": [SCREENS_BY_SLUG[slug] for slug in TABS], "screens": SCREENS}


def owner_required[V: Callable[..., HttpResponseBase]](view: V) -> V:
    """Only a session that passed password and second factor gets through; others sign in.

    A request carrying a session cookie that no longer opens a session is an expired session:
    audited, and the sign-in page says so.
    """

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        user = request.user
        if owner.is_verified_owner(user):
            security_settings.note_seen(request)  # the Settings screen's "last seen"
            return view(request, *args, **kwargs)
        query = {"next": request.get_full_path()}
        if user.is_authenticated:
            audit.record_request(
                AuditEvent.Kind.SESSION_UNVERIFIED, request, username=user.get_username()
            )
            logout(request)
        elif settings.SESSION_COOKIE_NAME in request.COOKIES:
            audit.record_request(AuditEvent.Kind.SESSION_EXPIRED, request)
            query["expired"] = "1"
        if request.htmx:  # type: ignore[attr-defined]
            # A partial must not swap the login page into a card: reload the whole page.
            response = HttpResponse(status=401)
            response["HX-Redirect"] = f"{reverse('console:login')}?{urlencode(query)}"
            return response
        return redirect(f"{reverse('console:login')}?{urlencode(query)}")

    return wrapper  # type: ignore[return-value]


def signed_in(request: HttpRequest) -> User:
    """The owner behind a request that passed `owner_required`."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user
