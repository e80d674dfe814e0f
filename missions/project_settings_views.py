"""The project page's "Long work" form: the owner's instructions, default criteria and smoke
command (`missions.project_settings`, as `PATCH /api/v1/projects/{id}`), and the owner's import
of the repository's AGENTS.md at the default branch head."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from agentos.core import audit
from agentos.core.shell import owner_required
from missions import project_settings, project_views, verification
from missions.errors import MissionError
from missions.models import Project
from missions.project_settings_forms import SettingsForm

ANCHOR = "#long-work"


@require_POST
@owner_required
def project_settings_save(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = SettingsForm(request.POST)
    if not form.is_valid():
        return project_views.render_settings(request, project, form, status=400)
    data = form.cleaned_data
    try:
        project_settings.configure(
            project,
            who=audit.Actor.of(request),
            instructions=data["instructions"],
            default_criteria=verification.from_lines(data["default_criteria"]),
            smoke_command=data["smoke_command"],
        )
    except MissionError as refused:
        for field, found in (refused.details or {}).get("fields", {}).items():
            for message in found:
                form.add_error(field if field in form.fields else None, message)
        return project_views.render_settings(request, project, form, status=refused.status)
    messages.success(request, _("Saved: runs started from now on follow these settings."))
    return redirect(reverse("console:project", args=[project.pk]) + ANCHOR)


@require_POST
@owner_required
def project_instructions_import(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        project = project_settings.import_instructions(project, who=audit.Actor.of(request))
    except MissionError as refused:
        messages.error(request, refused.message)
    else:
        name, _at, commit = project.instructions_from.partition(" at ")
        messages.success(
            request,
            _("Instructions imported from %(name)s at %(commit)s.")
            % {"name": name, "commit": commit[:12]},
        )
    return redirect(reverse("console:project", args=[project.pk]) + ANCHOR)
