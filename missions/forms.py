"""Console forms: a new mission, steering a run. They parse; `missions.launch`,
`missions.steering` and `kernel.runs` decide (their refusals are shown on the form)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from cluster import bridges as cluster_bridges
from kernel import budgets
from missions import offline, routing, steering, verification
from missions.launch import MAX_GOAL
from missions.models import ModelInfo, Profile, Project, RiskClass, Role

MICROS = Decimal(1_000_000)
# The wall-time cap in minutes, as seconds fit `Account.max_seconds` (a 32-bit integer).
MAX_MINUTES = (2**31 - 1) // 60


def executor_choices() -> list[tuple[str, str]]:
    """The executor's default route first (no override), then every model of the catalog."""
    default = routing.default_route(Role.EXECUTOR)
    label = (
        _("Default (%(route)s)") % {"route": f"{default.provider}/{default.model}"}
        if default
        else _("Default (none set: choose a model)")
    )
    choices = [("", str(label))]
    for info in ModelInfo.objects.order_by("provider", "model"):
        value = f"{info.provider}/{info.model}"
        name = f"{value} — {info.display_name}" if info.display_name else value
        choices.append((value, name))
    return choices


def offline_choices() -> list[tuple[str, Any]]:
    # An offline mission bound to a project (the demo's) is offered while that project exists.
    bound = [mission.project for mission in offline.MISSIONS.values() if mission.project]
    names = Project.objects.filter(name__in=bound).values_list("name", flat=True)
    return [("", _("A goal of mine, pursued by a model")), *offline.choices(set(names))]


def profile_choices() -> list[tuple[str, Any]]:
    return [
        ("", _("None: the roles' default models, every tool")),
        *(
            (name, f"{name} — {description}" if description else name)
            for name, description in Profile.objects.order_by("name").values_list(
                "name", "description"
            )
        ),
    ]


class MissionForm(forms.Form):
    project = forms.ModelChoiceField(
        label=_("Project"), queryset=Project.objects.order_by("name"), empty_label=None
    )
    profile = forms.ChoiceField(
        label=_("Profile"),
        required=False,
        choices=profile_choices,
        help_text=_(
            "Its models, tools and sandbox level (never below the risk class's), its checks when"
            " you give none, and its caps in place of those left at your defaults. Edit the"
            " profiles on the Agents screen."
        ),
    )
    offline = forms.ChoiceField(
        label=_("What to run"),
        required=False,
        choices=offline_choices,
        widget=forms.RadioSelect,
        help_text=_(
            "The offline missions need no model key: the offline model runs the tools on the"
            " project's repository and its report quotes what they returned. For them, the"
            " goal, the definition of done and the executor model below are not used."
        ),
    )
    goal = forms.CharField(
        label=_("Goal"),
        required=False,  # unless no offline mission is chosen (`clean`)
        max_length=MAX_GOAL,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_("What the agent should achieve, in your words."),
    )
    definition_of_done = forms.CharField(
        label=_("Definition of done"),
        required=False,
        max_length=MAX_GOAL,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("How you (and the agent) will know it is finished. Optional."),
    )
    checks = forms.CharField(
        label=_("Checks"),
        required=False,
        max_length=MAX_GOAL,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_(
            "One per line; the mission ends done only when each passes. A line starting with $"
            " is a command that must succeed in the project's repository (e.g. $ make test);"
            " any other line is a statement an independent evaluator checks. Optional."
        ),
    )
    risk_class = forms.ChoiceField(
        label=_("Risk class"),
        required=False,  # code, unless said otherwise
        choices=RiskClass.choices,
        initial=RiskClass.CODE,
        widget=forms.RadioSelect,
        help_text=_(
            "How closely its agents are confined. Research: read-only tools, no commands. Code:"
            " commands in a sandbox on the mission's own worktree. Untrusted code: each command"
            " in a disposable virtual machine (slower; for code you do not trust)."
        ),
    )
    max_usd = forms.DecimalField(
        label=_("Max spend ($)"),
        required=False,
        min_value=Decimal(0),
        max_digits=12,
        decimal_places=6,
        widget=forms.NumberInput(attrs={"step": "0.01", "inputmode": "decimal"}),
    )
    max_tokens = forms.IntegerField(label=_("Max tokens"), required=False, min_value=0)
    max_minutes = forms.IntegerField(
        label=_("Max wall time (minutes)"),
        required=False,
        min_value=1,
        max_value=MAX_MINUTES,
        help_text=_("Its run stops when this much time has passed since it started, waits too."),
    )
    max_turns = forms.IntegerField(label=_("Max model turns"), required=False, min_value=0)
    max_tool_calls = forms.IntegerField(label=_("Max tool calls"), required=False, min_value=0)
    executor = forms.ChoiceField(label=_("Executor model"), required=False, choices=[])
    bridges = forms.MultipleChoiceField(
        label=_("API bridges"),
        required=False,
        choices=[],
        widget=forms.CheckboxSelectMultiple,
        help_text=_(
            "APIs its sandboxes may call as http://<name>.bridge/…: the key is added outside the"
            " sandbox, and the agent never sees it. Add bridges in Settings."
        ),
    )
    allowed_hosts = forms.CharField(
        label=_("Extra hosts"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_(
            "One per line, host or host:port (globs allowed): what its sandboxes may reach"
            " besides your egress rules. Optional."
        ),
    )
    sensitive = forms.BooleanField(
        label=_("Sensitive: plan first, then read the Web"),
        required=False,
        help_text=_(
            "Its plan is fixed before it reads any untrusted content (a Web page, an outside"
            " agent's answer), so what it reads cannot change what it set out to do."
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["executor"].choices = executor_choices()  # type: ignore[attr-defined]  # a ChoiceField
        self.fields["bridges"].choices = [  # type: ignore[attr-defined]  # a ChoiceField
            (name, name) for name in cluster_bridges.names()
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("offline") and "goal" in data and not data["goal"].strip():
            self.add_error("goal", forms.Field.default_error_messages["required"])
        checks = verification.from_lines(data.get("checks") or "")
        data["criteria"] = None
        if checks and data.get("offline"):
            self.add_error(
                "checks", _("An offline mission has its own definition of done: leave this empty.")
            )
        elif checks:
            try:
                data["criteria"] = verification.validate(checks)
            except verification.CriteriaError as error:
                self.add_error("checks", error.message)
        data["risk_class"] = data.get("risk_class") or RiskClass.CODE
        if data.get("offline") and data.get("profile"):
            self.add_error(
                "profile", _("An offline mission has its own model and checks: choose no profile.")
            )
        if data.get("offline") and data["risk_class"] == RiskClass.RESEARCH:
            self.add_error(
                "risk_class",
                _("An offline mission runs the project's commands: choose Code or Untrusted."),
            )
        return data

    def launch_arguments(self) -> dict[str, Any]:
        """What `create_mission` takes from this form: an offline mission brings its own goal
        and model, so the fields for a goal of the owner's are left out."""
        data = self.cleaned_data
        if data.get("offline"):
            return {
                "project": data["project"],
                "caps": self.caps(),
                "offline": data["offline"],
                "risk_class": data["risk_class"],
            }
        return {
            "project": data["project"],
            "risk_class": data["risk_class"],
            "goal": data["goal"],
            "definition_of_done": data["definition_of_done"],
            "criteria": data["criteria"],
            "caps": self.caps(),
            "routes": self.routes(),
            "bridges": list(data.get("bridges") or []),
            "allowed_hosts": (data.get("allowed_hosts") or "").split(),
            "sensitive": bool(data.get("sensitive")),
            "profile": data.get("profile") or None,
        }

    def caps(self) -> dict[str, int | None]:
        """Budget caps as `create_mission` takes them (micro-dollars, seconds). The form shows
        the owner's defaults (`initial_caps`): a field left empty is no cap, said as null, so
        that the defaults do not come back behind the owner's back."""
        data = self.cleaned_data
        caps: dict[str, int | None] = {
            "max_usd_micros": None
            if data.get("max_usd") is None
            else int(data["max_usd"] * MICROS),
            "max_tokens": data.get("max_tokens"),
            "max_seconds": None
            if data.get("max_minutes") is None
            else int(data["max_minutes"]) * 60,
        }
        for name in ("max_turns", "max_tool_calls"):
            if data.get(name) is not None:
                caps[name] = int(data[name])
        if data.get("profile"):
            # A cap left at the owner's default, as the form showed it, is not named: the
            # profile's applies (`missions.profiles.apply`), else that default again.
            defaults = budgets.mission_defaults()
            caps = {
                name: value
                for name, value in caps.items()
                if name not in defaults or value != defaults[name]
            }
        return caps

    def routes(self) -> dict[str, dict[str, str]]:
        chosen = self.cleaned_data.get("executor") or ""
        if not chosen:
            return {}
        provider, _slash, model = chosen.partition("/")
        return {"executor": {"provider": provider, "model": model}}


def initial_caps() -> dict[str, Any]:
    """A new mission's form shows the caps it gets by default, for the owner to change."""
    defaults = budgets.mission_defaults()
    return {
        "max_usd": _dollars(defaults["max_usd_micros"]),
        "max_tokens": defaults["max_tokens"],
        "max_minutes": _minutes(defaults["max_seconds"]),
    }


def initial_from(mission: Any) -> dict[str, Any]:
    """A new mission's form filled from an earlier one (relaunch): an offline mission again as
    the same offline mission (its first root run's contract says which)."""
    route = mission.routes.get("executor") if isinstance(mission.routes, dict) else None
    first = mission.runs.filter(parent__isnull=True).order_by("pk").first()
    contract = first.contract if first is not None and isinstance(first.contract, dict) else {}
    if contract.get("offline") in offline.MISSIONS:
        return {
            "project": mission.project_id,
            "offline": contract["offline"],
            "risk_class": mission.risk_class,
            "max_usd": _dollars(mission.max_usd_micros),
            "max_tokens": mission.max_tokens,
            "max_minutes": _minutes(mission.max_seconds),
            "max_turns": mission.max_turns,
            "max_tool_calls": mission.max_tool_calls,
        }
    return {
        "project": mission.project_id,
        "goal": mission.goal,
        "definition_of_done": mission.definition_of_done,
        "checks": verification.to_lines(mission.criteria or []),
        "risk_class": mission.risk_class,
        "max_usd": _dollars(mission.max_usd_micros),
        "max_tokens": mission.max_tokens,
        "max_minutes": _minutes(mission.max_seconds),
        "max_turns": mission.max_turns,
        "max_tool_calls": mission.max_tool_calls,
        "executor": f"{route['provider']}/{route['model']}" if isinstance(route, dict) else "",
        "bridges": list(mission.bridges or []),
        "allowed_hosts": "\n".join(mission.allowed_hosts or []),
        "sensitive": mission.sensitive,
        "profile": mission.profile.name if mission.profile is not None else "",
    }


def _dollars(micros: int | None) -> Decimal | None:
    return Decimal(micros) / MICROS if micros is not None else None


def _minutes(seconds: int | None) -> int | None:
    return -(-seconds // 60) if seconds is not None else None


class MessageForm(forms.Form):
    text = forms.CharField(
        label=_("Message to the agent"),
        max_length=steering.MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("Delivered before its next model call."),
    )
    interrupt = forms.BooleanField(
        label=_("Interrupt the current step"),
        required=False,
        help_text=_("Cuts a long tool call short so the message arrives now."),
    )


class ForkForm(forms.Form):
    seq = forms.IntegerField(min_value=1)
