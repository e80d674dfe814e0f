"""Console pages of missions: the list, a new mission, one mission with its live run tree and
artifacts, artifact downloads, and costs. Runs and their steering are in `missions.run_views`.

Missions start through `missions.launch.create_mission`, as from the API and schedules.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_safe

from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from kernel import artifacts as artifact_files
from kernel.exceptions import KernelError
from kernel.models import Artifact
from missions import costs, overview, profile_costs, provider_states, result, routing
from missions.engine import outage
from missions.errors import MissionError
from missions.forms import MissionForm, initial_caps, initial_from
from missions.launch import create_mission
from missions.models import Mission, Project, Role
from missions.providers import registry
from tools import levels

# Served inline only when a browser cannot run them as a page of this origin; everything else
# (HTML, SVG, scripts...) is a download, whatever the agent named it.
INLINE_TYPES = frozenset(
    {"text/plain", "application/json", "image/png", "image/jpeg", "image/gif", "image/webp"}
)


@require_safe
@owner_required
def mission_list(request: HttpRequest) -> HttpResponse:
    rows = overview.missions()
    context = {
        "screen": SCREENS_BY_SLUG["missions"],
        "rows": rows,
        "total": Mission.objects.count(),
        "collected_at": timezone.now(),
    }
    return render(request, "missions/list.html", context)


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def mission_new(request: HttpRequest) -> HttpResponse:
    initial: dict[str, Any] = initial_caps()
    relaunch = request.GET.get("from", "")
    earlier = Mission.objects.filter(pk=int(relaunch)).first() if relaunch.isdigit() else None
    if earlier is not None:
        initial = initial_from(earlier)
    form = MissionForm(request.POST or None, initial=initial)
    status = 200
    refusal = ""
    if request.method == "POST":
        if form.is_valid():
            try:
                mission, _run = create_mission(**form.launch_arguments(), trigger="console")
            # The mission's refusal (goal, routes) or the kernel's (caps, the account's limits).
            except (MissionError, KernelError) as refused:
                form.add_error(None, refused.message)
                status, refusal = refused.status, refused.code
            else:
                return redirect("console:mission", mission_id=mission.pk)
        else:
            status = 400
    default = routing.default_route(Role.EXECUTOR)
    context = {
        "screen": SCREENS_BY_SLUG["missions"],
        "form": form,
        "has_projects": Project.objects.exists(),
        "keys": provider_states.states(),
        # A goal of the owner's needs a model: say so before the owner writes one.
        "model_ready": default is not None
        and default.provider != "scripted"
        and registry.ready(default.provider),
        "needs_a_model": refusal == "no_provider",
        # A relaunch starts in one more tap: its Start is at the top, the form below to change.
        "relaunch_of": earlier if request.method != "POST" else None,
    }
    return render(request, "missions/new.html", context, status=status)


@require_safe
@owner_required
def mission_detail(request: HttpRequest, mission_id: int) -> HttpResponse:
    mission = get_object_or_404(Mission.objects.select_related("project"), pk=mission_id)
    tree = overview.tree(mission)
    live = {
        "mission": mission,
        "tree": tree,
        "result": result.of(tree),
        "budget": _budget(mission),
        "ledger": overview.ledger_of(mission),
        "held": outage.waiting_in(mission.pk),
    }
    if request.htmx and request.htmx.target == "run-tree":  # type: ignore[attr-defined]
        return render(request, "missions/mission.html#tree", live)
    context = {
        **live,
        "screen": SCREENS_BY_SLUG["missions"],
        "artifacts": overview.artifacts(mission),
        # Its units of long work (`missions.units`), in order.
        "units": list(mission.units.all()),
        "route": mission.routes.get("executor") if isinstance(mission.routes, dict) else None,
        "sandbox_level": levels.level_for(mission.risk_class),
    }
    return render(request, "missions/mission.html", context)


def _budget(mission: Mission) -> list[dict[str, Any]]:
    """Caps next to what was spent; `money` rows are micro-dollars."""
    spent = mission.spent()
    return [
        {
            "label": _("Spend"),
            "spent": spent["usd_micros"],
            "cap": mission.max_usd_micros,
            "money": True,
        },
        {"label": _("Tokens"), "spent": spent["tokens"], "cap": mission.max_tokens},
        {"label": _("Model turns"), "spent": spent["turns"], "cap": mission.max_turns},
        {"label": _("Tool calls"), "spent": spent["tool_calls"], "cap": mission.max_tool_calls},
    ]


@require_safe
@owner_required
def artifact(request: HttpRequest, sha256: str) -> FileResponse:
    found = Artifact.objects.filter(sha256=sha256).first()
    if found is None:
        raise Http404(_("No such artifact."))
    try:
        handle = artifact_files.open_artifact(found)
    except FileNotFoundError:
        raise Http404(_("The artifact's file is missing from the data folder.")) from None
    media_type = found.media_type or "application/octet-stream"
    inline = media_type.split(";")[0].strip().lower() in INLINE_TYPES
    # FileResponse closes the file once it is sent.
    return FileResponse(
        handle,
        content_type=media_type,
        as_attachment=not inline,
        filename=found.name or found.sha256,
    )


@require_safe
@owner_required
def cost_report(request: HttpRequest) -> HttpResponse:
    context = {
        "screen": SCREENS_BY_SLUG["costs"],
        "report": costs.report(),
        "profiles": profile_costs.report(),
    }
    return render(request, "missions/costs.html", context)
