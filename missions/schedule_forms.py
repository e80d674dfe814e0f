"""The console's schedule form: the New mission form's fields (the template) and the schedule's
own (cron, time zone, catch-up, overlap). It parses; `missions.schedules` decides, and its
refusals are shown next to the fields they name."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from missions import cron, verification
from missions.errors import MissionError
from missions.forms import MissionForm, initial_caps
from missions.models import CatchUp, RiskClass, Schedule, default_timezone
from tools.mcp.models import McpServer

MICROS = Decimal(1_000_000)

# Where a refusal of the service is shown: its field name, as the API says it, to the form's.
FIELDS = {
    "name": "name",
    "cron": "cron",
    "timezone": "timezone",
    "catch_up": "catch_up",
    "mission.project_id": "project",
    "mission.goal": "goal",
    "mission.definition_of_done": "definition_of_done",
    "mission.criteria": "checks",
    "mission.risk_class": "risk_class",
    "mission.mcp_servers": "mcp_servers",
    "mission.routes": "executor",
    "mission.allowed_hosts": "allowed_hosts",
    "mission.bridges": "bridges",
    "mission.profile": "profile",
}


def timezone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(cron.available_zones())]


class ScheduleForm(MissionForm):
    name = forms.CharField(
        label=_("Name"),
        required=False,
        max_length=120,
        help_text=_("Empty: the first line of the goal."),
    )
    cron = forms.CharField(
        label=_("When (cron expression)"),
        max_length=100,
        widget=forms.TextInput(
            attrs={"autocapitalize": "none", "spellcheck": "false", "autocomplete": "off"}
        ),
        help_text=_(
            "Five fields: minute hour day-of-month month day-of-week (0 is Sunday), e.g."
            " 0 7 * * 1-5 for 07:00 on weekdays. Each field takes numbers, *, a-b, a,b and */n."
        ),
    )
    timezone = forms.ChoiceField(
        label=_("Time zone"),
        choices=timezone_choices,
        help_text=_("The times above are read in this time zone, daylight saving included."),
    )
    catch_up = forms.ChoiceField(
        label=_("After a downtime"),
        choices=CatchUp.choices,
        initial=CatchUp.SKIP,
        widget=forms.RadioSelect,
        help_text=_(
            "What becomes of the times missed while agentos was down (at most 31 days back):"
            " each is on its history either way."
        ),
    )
    allow_overlap = forms.BooleanField(
        label=_("Allow overlap"),
        required=False,
        help_text=_(
            "Start a mission even while the previous one still runs. Otherwise that time is"
            " skipped, and its history says so."
        ),
    )
    mcp_servers = forms.MultipleChoiceField(
        label=_("MCP servers"),
        required=False,
        choices=[],
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Approved MCP servers its agents may use besides its project's."),
    )

    field_order = ["name", "cron", "timezone", "catch_up", "allow_overlap"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Its next five times, asked of the server as the owner types (htmx, no script of ours).
        self.fields["cron"].widget.attrs.update(
            {
                "hx-get": reverse("console:schedule-preview"),
                "hx-trigger": "input changed delay:400ms",
                "hx-include": "[name=timezone]",
                "hx-target": "#cron-preview",
                "hx-swap": "outerHTML",
            }
        )
        self.fields["timezone"].widget.attrs.update(
            {
                "hx-get": reverse("console:schedule-preview"),
                "hx-trigger": "change",
                "hx-include": "[name=cron]",
                "hx-target": "#cron-preview",
                "hx-swap": "outerHTML",
            }
        )
        self.fields["mcp_servers"].choices = [  # type: ignore[attr-defined]  # a ChoiceField
            (name, name)
            for name in McpServer.objects.filter(approved_at__isnull=False)
            .order_by("name")
            .values_list("name", flat=True)
        ]

    def template(self, earlier: dict[str, Any] | None = None) -> dict[str, Any]:
        """The mission template (the body of POST /api/v1/missions) the form describes. Routes of
        roles the form does not show are kept from the `earlier` template."""
        arguments = self.launch_arguments()
        template: dict[str, Any] = {"project_id": arguments.pop("project").pk}
        routes = arguments.pop("routes", {})
        kept = {
            role: route
            for role, route in ((earlier or {}).get("routes") or {}).items()
            if role not in routes and role != "executor"
        }
        if routes or kept:
            template["routes"] = {**kept, **routes}
        for name, value in arguments.items():
            if value not in (None, "", [], False):
                template[name] = value
        if self.cleaned_data.get("mcp_servers"):
            template["mcp_servers"] = list(self.cleaned_data["mcp_servers"])
        return template

    def schedule_values(self, earlier: dict[str, Any] | None = None) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data.get("name") or "",
            "cron": data["cron"],
            "timezone": data["timezone"],
            "catch_up": data["catch_up"],
            "allow_overlap": bool(data.get("allow_overlap")),
            "mission": self.template(earlier),
        }

    def show_refusal(self, refused: MissionError) -> None:
        """The service's refusal next to the fields it names, the rest above the form."""
        details = refused.details if isinstance(refused.details, dict) else {}
        fields = details.get("fields") if isinstance(details.get("fields"), dict) else {}
        if not fields:
            self.add_error(None, refused.message)
            return
        for name, messages in fields.items():
            field = FIELDS.get(name)
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


def initial_for(schedule: Schedule | None) -> dict[str, Any]:
    """The form as a new schedule starts, or filled from a schedule to edit."""
    if schedule is None:
        return {**initial_caps(), "timezone": default_timezone(), "catch_up": CatchUp.SKIP}
    template = schedule.mission if isinstance(schedule.mission, dict) else {}
    caps = template.get("caps") or {}
    defaults = initial_caps()
    route = (template.get("routes") or {}).get("executor")
    usd = caps.get("max_usd_micros")
    seconds = caps.get("max_seconds")
    return {
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "catch_up": schedule.catch_up,
        "allow_overlap": schedule.allow_overlap,
        "project": template.get("project_id"),
        "offline": template.get("offline") or "",
        "goal": template.get("goal", ""),
        "definition_of_done": template.get("definition_of_done", ""),
        "checks": verification.to_lines(template.get("criteria") or []),
        "risk_class": template.get("risk_class", RiskClass.CODE),
        # A cap the template leaves out is the owner's default, shown as such.
        "max_usd": defaults["max_usd"] if "max_usd_micros" not in caps else _dollars(usd),
        "max_tokens": caps.get("max_tokens", defaults["max_tokens"]),
        "max_minutes": defaults["max_minutes"]
        if "max_seconds" not in caps
        else (None if seconds is None else -(-seconds // 60)),
        "max_turns": caps.get("max_turns"),
        "max_tool_calls": caps.get("max_tool_calls"),
        "executor": f"{route['provider']}/{route['model']}" if isinstance(route, dict) else "",
        "bridges": list(template.get("bridges") or []),
        "allowed_hosts": "\n".join(template.get("allowed_hosts") or []),
        "sensitive": bool(template.get("sensitive")),
        "mcp_servers": list(template.get("mcp_servers") or []),
        "profile": template.get("profile") or "",
    }


def _dollars(micros: int | None) -> Decimal | None:
    return None if micros is None else Decimal(micros) / MICROS
