"""The Projects screen: the owner's repositories, a project's missions, its runs' worktrees and
how long each is kept. Projects are created here as through the API (`missions.projects`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from kernel.models import Run
from missions import credential_views, overview, projects
from missions import environments as project_environments
from missions import project_pull as pulls
from missions.errors import MissionError
from missions.models import Mission, Project
from missions.project_settings_forms import SettingsForm, form_for
from tools import retention
from tools.models import CredentialKind, PermissionRule, RemoteCredential

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
    clone_url = forms.CharField(
        label=_("Or clone it from a URL"),
        max_length=500,
        required=False,
        help_text=_("https://host/path, ssh://user@host/path or user@host:path."),
        widget=forms.TextInput(attrs={"inputmode": "url", "autocapitalize": "none"}),
    )
    credential_kind = forms.ChoiceField(
        label=_("The remote asks for"),
        required=False,
        choices=[("", _("nothing (public)")), *CredentialKind.choices],
    )
    credential_username = forms.CharField(
        label=_("User name for the token"),
        max_length=200,
        required=False,
        help_text=_("Empty for x-access-token (GitHub, GitLab and Gitea accept it)."),
    )
    credential_secret = forms.CharField(
        label=_("Token or SSH private key"),
        max_length=20_000,
        required=False,
        strip=False,
        help_text=_(
            "Kept encrypted on this machine, used for this project's fetches and pushes"
            " only, never shown again."
        ),
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "autocomplete": "off",
                "spellcheck": "false",
                "autocapitalize": "none",
            }
        ),
    )
    description = forms.CharField(
        label=_("Description"), required=False, widget=forms.Textarea(attrs={"rows": 3})
    )

    def credential(self) -> projects.Credential | None:
        kind = self.cleaned_data["credential_kind"]
        secret = self.cleaned_data["credential_secret"]
        if not kind and not secret.strip():
            return None
        return projects.Credential(
            kind=kind, secret=secret, username=self.cleaned_data["credential_username"].strip()
        )


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                project = projects.create_project(
                    name=form.cleaned_data["name"],
                    description=form.cleaned_data["description"],
                    repository=form.cleaned_data["repository"],
                    clone_url=form.cleaned_data["clone_url"],
                    credential=form.credential(),
                )
            except MissionError as refused:
                fields = {"credential": "credential_secret"}
                for field, messages in (refused.details or {}).get("fields", {}).items():
                    field = fields.get(field, field)
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


class EnvironmentForm(forms.Form):
    setup = forms.CharField(
        label=_("Environment setup"),
        required=False,
        max_length=project_environments.MAX_SETUP,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text=Project._meta.get_field("environment_setup").help_text,
    )


@require_safe
@owner_required
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    form = EnvironmentForm(initial={"setup": project.environment_setup})
    return _detail(request, project, form)


def render_detail(
    request: HttpRequest,
    project: Project,
    *,
    credential_form: credential_views.CredentialForm,
    status: int,
) -> HttpResponse:
    """The project page with its push credential's form refused (`missions.credential_views`)."""
    form = EnvironmentForm(initial={"setup": project.environment_setup})
    return _detail(request, project, form, status=status, credential_form=credential_form)


def render_settings(
    request: HttpRequest, project: Project, settings_form: SettingsForm, *, status: int
) -> HttpResponse:
    """The project page with its long-work settings refused (`missions.project_settings_views`)."""
    form = EnvironmentForm(initial={"setup": project.environment_setup})
    return _detail(request, project, form, status=status, settings_form=settings_form)


def _detail(
    request: HttpRequest,
    project: Project,
    form: EnvironmentForm,
    status: int = 200,
    credential_form: credential_views.CredentialForm | None = None,
    settings_form: SettingsForm | None = None,
) -> HttpResponse:
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
        "environment_form": form,
        "credential_form": credential_form or credential_views.CredentialForm(),
        "settings_form": settings_form or form_for(project),
    }
    return render(request, "missions/project.html", context, status=status)


@require_http_methods(["POST"])
@owner_required
def project_environment(request: HttpRequest, project_id: int) -> HttpResponse:
    """The owner's setup commands saved: the default branch head pinned, a build queued."""
    project = get_object_or_404(Project, pk=project_id)
    form = EnvironmentForm(request.POST)
    if not form.is_valid():
        return _detail(request, project, form, status=400)
    try:
        project_environments.configure(
            project, setup=form.cleaned_data["setup"], who=project_environments.Who.of(request)
        )
    except MissionError as refused:
        for messages_of in (refused.details or {}).get("fields", {}).values():
            for message in messages_of:
                form.add_error("setup", message)
        return _detail(request, project, form, status=refused.status)
    messages.success(request, _("Environment saved; its build is queued."))
    return redirect("console:project", project_id=project.pk)


@require_http_methods(["POST"])
@owner_required
def project_environment_rebuild(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        project_environments.rebuild(project, who=project_environments.Who.of(request))
    except MissionError as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, _("Rebuild queued on the default branch as it is now."))
    return redirect("console:project", project_id=project.pk)


@require_http_methods(["POST"])
@owner_required
def project_refresh(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        projects.refresh(project)
    except MissionError as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, _("Updated from %(url)s.") % {"url": project.clone_url})
    return redirect("console:project", project_id=project.pk)


@require_http_methods(["POST"])
@owner_required
def project_pull(request: HttpRequest, project_id: int) -> HttpResponse:
    project = get_object_or_404(Project, pk=project_id)
    try:
        pulled = pulls.pull(project)
    except MissionError as refused:
        messages.error(request, refused.message)
    else:
        if pulled is None:
            messages.success(request, _("Updated from %(url)s.") % {"url": project.clone_url})
        elif pulled.moved:
            messages.success(
                request,
                _("%(branch)s fast-forwarded from %(before)s to %(after)s (%(remote)s).")
                % {
                    "branch": pulled.branch,
                    "before": pulled.before[:12],
                    "after": pulled.after[:12],
                    "remote": pulled.remote,
                },
            )
        else:
            messages.success(
                request,
                _("%(branch)s is up to date with %(remote)s.")
                % {"branch": pulled.branch, "remote": pulled.remote},
            )
    return redirect("console:project", project_id=project.pk)


@sensitive_post_parameters("secret")
@require_POST
@owner_required
def project_credential(request: HttpRequest, project_id: int) -> HttpResponse:
    """A push credential of a remote of the project, set on its page."""
    project = get_object_or_404(Project, pk=project_id)
    form = credential_views.CredentialForm(request.POST)
    if not form.is_valid() or not credential_views.save(request, project, form):
        shown = credential_views.without_secret(form)
        return render_detail(request, project, credential_form=shown, status=400)
    return redirect(reverse("console:project", args=[project.pk]) + "#push-credentials")
