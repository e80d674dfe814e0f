"""The Web search part of the Settings page: the backend `web_search` asks, set or removed
through `missions.actions` (the API's path). A refusal is a flash message naming what is wrong;
the page shows the backend as stored."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from agentos.core import audit
from agentos.core.shell import owner_required
from missions import actions
from missions.errors import MissionError


@require_http_methods(["POST"])
@owner_required
def web_search_settings(request: HttpRequest) -> HttpResponse:
    actor = audit.Actor.of(request)
    back = redirect(reverse("console:settings") + "#web")
    if request.POST.get("action") == "remove":
        actions.remove_search_backend(actor=actor)
        messages.success(request, _("The web search backend is removed."))
        return back
    try:
        actions.set_search_backend(
            kind=request.POST.get("kind", ""),
            url=request.POST.get("url", ""),
            bridge=request.POST.get("bridge", ""),
            actor=actor,
        )
    except MissionError as refused:
        messages.error(request, _("Web search not saved: %(why)s") % {"why": refused.message})
        return back
    messages.success(request, _("The web search backend is saved."))
    return back
