"""The Projects screen: the owner's repositories, a project's missions, its runs' worktrees and
how long each is kept. Projects are created here as through the API (`missions.projects`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_safe

from agentos.views import SCREENS_BY_SLUG, owner_required
from kernel.models import Run
from missions import overview, projects
from missions.errors import MissionError
from missions.models import Mission, Project
from tools import retention
from tools.models import PermissionRule, RemoteCredential

MISSIONS_SHOWN = 50
WORKTREES_SHOWN = 50


class ProjectForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=120)
    repository = forms.CharField(
        label=_("Git repository (local path)"),
        max_length=500,
        required=False,
        help_text=_("The absolute path of a git repository on this machine; empty for none."),
    )
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 3})
    )


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                project = projects.create_project(**form.cleaned_data)
            except MissionError as refused:
                for field, messages in (refused.details or {}).get("fields", {}).items():
                    for message in messages:
                        form.add_error(field if field in form.fields else None, message)
                status = refused.status
            else:
                return redirect("console:project", project_id=project.pk)
        else:
            status = 400
    rows = Project.objects.annotate(
        mission_count=Count("missions"), last_mission_at=Max("missions__created_at")
    ).order_by("name")
    context = {"screen": SCREENS_BY_SLUG["projects"], "rows": rows, "form": form}
    return render(request, "missions/projects.html", context, status=status)


@require_safe
@owner_required
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    with_worktree = (
        Run.objects.filter(account__mission__project=project)
        .exclude(workspace="")
        .order_by("-created_at")[:WORKTREES_SHOWN]
    )
    context: dict[str, Any] = {
        "screen": SCREENS_BY_SLUG["projects"],
        "project": project,
        "missions": overview.missions(limit=MISSIONS_SHOWN, project=project),
        "mission_total": Mission.objects.filter(project=project).count(),
        "worktrees": [(run, retention.keeping(run)) for run in with_worktree],
        "worktree_days": settings.WORKTREE_DAYS,
        "credentials": RemoteCredential.objects.filter(project=project).order_by("remote"),
        "rules": PermissionRule.objects.filter(project=project).count(),
    }
    return render(request, "missions/project.html", context)
