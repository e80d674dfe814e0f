"""The Tools screen: what each tool does to the world (effect, risk, minimum sandbox level), the
owner's permission rules per project (added and removed here; the admin stays the back office),
the MCP servers (their tools, pins and pending changes), the skills, the search backend, the API
bridges, and the rule of two's flags of the missions running now. Rules are decided in
the harness (`tools.permissions`); this page only edits them. It lives in the project shell
because it shows what several apps hold."""

from __future__ import annotations

import shlex
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_POST

from agentos.core import audit
from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from cluster import bridges
from cluster.models import ApiBridge
from kernel import exposure
from kernel.models import TERMINAL, Run
from memory import skill_proposals
from memory import skills as memory_skills
from missions import search
from tools import actions, registry
from tools.base import Risk
from tools.mcp import servers as mcp_servers
from tools.mcp.models import McpServer
from tools.models import Decision, PermissionRule
from tools.permissions import DEFAULTS

MAX_RUNNING = 50
# Tools no mission's agent is given, so no rule of the owner's can apply to them: `noop` is the
# engine's tests' and benchmark's, `load_tool_schema` the loop's own way of loading a deferred
# tool's schema (docs/design.md §13). The rule picker leaves them out.
INTERNAL_TOOLS = frozenset({"noop", "load_tool_schema"})


class RuleForm(forms.ModelForm):  # type: ignore[type-arg]  # django-stubs: ModelForm[Model]
    class Meta:
        model = PermissionRule
        fields = ["project", "tool", "pattern", "decision", "note"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        project = self.fields["project"]
        project.empty_label = _("every project")  # type: ignore[attr-defined]  # a ModelChoiceField
        names = sorted(
            tool.name for tool in registry.TOOLS.values() if tool.name not in INTERNAL_TOOLS
        )
        self.fields["tool"] = forms.ChoiceField(
            label=_("tool"),
            choices=[("*", _("* (every tool)")), *((name, name) for name in names)],
        )


class McpServerForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=31)
    command = forms.CharField(
        label=_("Command"),
        required=False,
        max_length=2000,
        help_text=_("A stdio server's command line, run in the sandbox (e.g. mcp-server-time)."),
    )
    url = forms.CharField(
        label=_("URL"),
        required=False,
        max_length=500,
        help_text=_("Or a streamable-HTTP server's URL, reached through the egress proxy."),
    )
    bridge = forms.CharField(
        label=_("Bridge"),
        required=False,
        max_length=31,
        help_text=_("The API bridge that adds the server's credential. Optional."),
    )

    def clean_command(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data.get("command") or "")
        except ValueError as error:
            raise forms.ValidationError(
                _("Not a command line: %(error)s.") % {"error": error}
            ) from None


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def tools_screen(request: HttpRequest) -> HttpResponse:
    form = RuleForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            actions.add_permission_rule(rule=form.save(commit=False), actor=audit.Actor.of(request))
            return redirect("console:tools")
        status = 400
    return _screen(request, form=form, status=status)


@require_POST
@owner_required
def add_mcp_server(request: HttpRequest) -> HttpResponse:
    """Register an MCP server (`tools.mcp.servers.add_server`: it must start and list its
    tools); its tools wait for the owner's approval."""
    form = McpServerForm(request.POST)
    if not form.is_valid():
        return _screen(request, mcp_form=form, status=400)
    data = form.cleaned_data
    try:
        mcp_servers.add_server(
            name=data["name"],
            command=data["command"] or None,
            url=data["url"] or None,
            bridge=data["bridge"],
            actor=audit.Actor.of(request),
        )
    except mcp_servers.McpServerError as refused:
        form.add_error(None, refused.message)
        return _screen(request, mcp_form=form, status=refused.status)
    return redirect(f"{reverse('console:tools')}#mcp-servers")


@require_POST
@owner_required
def approve_mcp_server(request: HttpRequest, name: str) -> HttpResponse:
    """Pin the server's tools as listed now (`tools.mcp.servers.approve`)."""
    try:
        mcp_servers.approve(server=mcp_servers.server_or_404(name), actor=audit.Actor.of(request))
    except mcp_servers.McpServerError as refused:
        return _screen(request, mcp_error=refused.message, status=refused.status)
    return redirect(f"{reverse('console:tools')}#mcp-servers")


def _screen(
    request: HttpRequest,
    *,
    form: RuleForm | None = None,
    mcp_form: McpServerForm | None = None,
    mcp_error: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "screen": SCREENS_BY_SLUG["tools"],
        "tools": [
            {"tool": tool, "default": Decision(DEFAULTS[Risk(tool.risk)]).label}
            for tool in sorted(registry.TOOLS.values(), key=lambda tool: tool.name)
        ],
        "rules": PermissionRule.objects.select_related("project").order_by(
            "project__name", "tool", "pattern"
        ),
        "form": form or RuleForm(),
        "mcp_form": mcp_form or McpServerForm(),
        "mcp_error": mcp_error,
        "bridges": [bridges.describe(bridge) for bridge in ApiBridge.objects.all()],
        "mcp_servers": _mcp_servers(),
        "skills": memory_skills.from_memory()[0],
        "skill_proposals": skill_proposals.pending(),
        "search_backend": search.get(),
        "running": _rule_of_two_now(),
    }
    return render(request, "console/tools.html", context, status=status)


def _mcp_servers() -> list[dict[str, Any]]:
    """Each MCP server with its tools, and the diff of each tool whose text changed since the
    owner pinned it (disabled until approved again)."""
    found = McpServer.objects.prefetch_related("tools").order_by("name")
    return [
        {
            "server": server,
            "tools": [
                {"tool": tool, "diff": mcp_servers.diff(tool)}
                for tool in sorted(server.tools.all(), key=lambda tool: tool.name)
            ],
        }
        for server in found
    ]


def _rule_of_two_now() -> list[dict[str, Any]]:
    """The root runs going on now, each with its tree's flags (`kernel.exposure`)."""
    roots = Run.objects.filter(parent__isnull=True).exclude(status__in=TERMINAL)
    return [
        {"run": run, "flags": exposure.of_tree(run.pk).flags}
        for run in roots.select_related("account__mission").order_by("-pk")[:MAX_RUNNING]
    ]


@require_POST
@owner_required
def delete_rule(request: HttpRequest, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(PermissionRule, pk=rule_id)
    actions.remove_permission_rule(rule=rule, actor=audit.Actor.of(request))
    return redirect("console:tools")
