"""The Profiles section of the Agents & policies screen: each domain profile with its form, and a
form for a new one. The form parses the owner's lines; `missions.profiles.save` decides, and its
refusals are shown next to the fields they name (the API's PUT /profiles/{name} calls it too)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django import forms
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from agentos.core import audit
from missions import profiles
from missions.errors import MissionError
from missions.models import Profile
from tools import levels

MICROS = Decimal(1_000_000)
LEVELS = [(level, f"{level}: {levels.NAMES[level]}") for level in sorted(profiles.CLASS_OF_LEVEL)]
ROUTE_LINE = re.compile(r"^(?P<role>[a-z_]+)\s*:\s*(?P<rest>.*)$")
# Where a refusal of the service is shown: its field, as `profiles.validate` names it.
FIELDS = {"max_usd_micros": "max_usd", "max_seconds": "max_minutes"}


def _lines(attrs: dict[str, Any] | None = None) -> forms.Textarea:
    return forms.Textarea(
        attrs={"rows": 3, "autocapitalize": "none", "spellcheck": "false", **(attrs or {})}
    )


class ProfileForm(forms.Form):
    name = forms.SlugField(
        label=_("Name"),
        max_length=40,
        help_text=_("Lowercase letters, digits and dashes: what a mission names it by."),
    )
    description = forms.CharField(
        label=_("Description"),
        required=False,
        max_length=profiles.MAX_DESCRIPTION,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    sandbox_level = forms.TypedChoiceField(
        label=_("Sandbox level, at least"),
        choices=LEVELS,
        coerce=int,
        initial=1,
        help_text=_("A mission's risk class may raise it, never lower it."),
    )
    routes = forms.CharField(
        label=_("Models"),
        required=False,
        widget=_lines(),
        help_text=_(
            "One role a line: role: provider/model [effort], or role: effort for the role's"
            " default model at that effort (e.g. executor: high). Empty: the roles' defaults."
        ),
    )
    tools = forms.CharField(
        label=_("Tools"),
        required=False,
        widget=_lines(),
        help_text=_(
            "Tool names, separated by spaces or lines. Empty: every tool its level allows."
        ),
    )
    mcp_servers = forms.CharField(
        label=_("MCP servers"),
        required=False,
        widget=forms.TextInput(attrs={"autocapitalize": "none", "spellcheck": "false"}),
        help_text=_("Approved servers added to each mission's, separated by spaces."),
    )
    skills = forms.CharField(
        label=_("Skills"),
        required=False,
        widget=forms.TextInput(attrs={"autocapitalize": "none", "spellcheck": "false"}),
        help_text=_("Skills offered, by name, separated by spaces. Empty: every skill found."),
    )
    criteria = forms.CharField(
        label=_("Checks"),
        required=False,
        widget=_lines({"spellcheck": "true"}),
        help_text=_(
            "A mission's checks when it gives none, one a line: $ command, or a statement an"
            " independent evaluator checks."
        ),
    )
    max_usd = forms.DecimalField(
        label=_("Spend cap ($)"),
        required=False,
        min_value=Decimal("0.000001"),
        max_digits=12,
        decimal_places=6,
        widget=forms.NumberInput(attrs={"step": "0.01", "inputmode": "decimal"}),
        help_text=_("A mission's, when it names none; empty: your default."),
    )
    max_tokens = forms.IntegerField(label=_("Token cap"), required=False, min_value=1)
    max_minutes = forms.IntegerField(
        label=_("Wall-time cap (minutes)"),
        required=False,
        min_value=1,
        max_value=(2**31 - 1) // 60,
    )

    def clean_routes(self) -> dict[str, Any]:
        routes: dict[str, Any] = {}
        for line in (line.strip() for line in self.cleaned_data["routes"].splitlines()):
            match = ROUTE_LINE.match(line)
            if not line:
                continue
            if match is None:
                raise forms.ValidationError(
                    _("%(line)s: write role: provider/model [effort], or role: effort.")
                    % {"line": line}
                )
            words = match["rest"].split()
            route: dict[str, Any] = {}
            if words and "/" in words[0]:
                route["provider"], route["model"] = words.pop(0).split("/", 1)
            if words:
                route["effort"] = words.pop(0)
            if words or not route:
                raise forms.ValidationError(
                    _("%(line)s: write role: provider/model [effort], or role: effort.")
                    % {"line": line}
                )
            routes[match["role"]] = route
        return routes

    def values(self) -> dict[str, Any]:
        """The profile's fields as `profiles.save` takes them."""
        data = self.cleaned_data
        usd, minutes = data.get("max_usd"), data.get("max_minutes")
        return {
            "description": data.get("description") or "",
            "routes": data["routes"],
            "tools": (data.get("tools") or "").split(),
            "mcp_servers": (data.get("mcp_servers") or "").split(),
            "skills": (data.get("skills") or "").split(),
            "sandbox_level": data["sandbox_level"],
            "criteria": [line.strip() for line in data["criteria"].splitlines() if line.strip()],
            "max_tokens": data.get("max_tokens"),
            "max_usd_micros": None if usd is None else int(usd * MICROS),
            "max_seconds": None if minutes is None else minutes * 60,
        }

    def show_refusal(self, refused: MissionError) -> None:
        fields = refused.details.get("fields") if isinstance(refused.details, dict) else None
        if not isinstance(fields, dict) or not fields:
            self.add_error(None, refused.message)
            return
        for name, messages in fields.items():
            field = FIELDS.get(name, name)
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


def initial_of(profile: Profile) -> dict[str, Any]:
    usd, seconds = profile.max_usd_micros, profile.max_seconds
    return {
        "name": profile.name,
        "description": profile.description,
        "sandbox_level": profile.sandbox_level,
        "routes": "\n".join(
            f"{role}: "
            + " ".join(
                part
                for part in (
                    f"{route['provider']}/{route['model']}" if "provider" in route else "",
                    route.get("effort") or "",
                )
                if part
            )
            for role, route in (profile.routes or {}).items()
        ),
        "tools": "\n".join(profile.tools),
        "mcp_servers": " ".join(profile.mcp_servers),
        "skills": " ".join(profile.skills),
        "criteria": "\n".join(profile.criteria),
        "max_usd": None if usd is None else Decimal(usd) / MICROS,
        "max_tokens": profile.max_tokens,
        "max_minutes": None if seconds is None else -(-seconds // 60),
    }


def form_for(profile: Profile | None, data: Any = None) -> ProfileForm:
    """A profile's form (or the new profile's): its own prefix, so that ids stay unique."""
    prefix = f"profile-{profile.name}" if profile else "profile-new"
    initial = initial_of(profile) if profile else {"sandbox_level": 1}
    form = ProfileForm(data, prefix=prefix, initial=initial)
    if profile is not None:
        form.fields["name"].widget = forms.HiddenInput()
    return form


def rows(posted: tuple[str, ProfileForm] | None = None) -> dict[str, Any]:
    """Each profile with its form (the posted one as posted), and the new profile's form."""
    target, form = posted if posted is not None else ("", None)
    return {
        "profiles": [
            {
                "profile": profile,
                "form": form if form is not None and target == profile.name else form_for(profile),
            }
            for profile in Profile.objects.order_by("name")
        ],
        "new_profile_form": form if form is not None and target == "" else form_for(None),
    }


def post(request: HttpRequest) -> tuple[bool, tuple[str, ProfileForm]]:
    """Save the posted profile's form (`profile`: its name, empty for a new one): whether it
    was saved, and the form as posted."""
    target = request.POST.get("profile", "")
    profile = Profile.objects.filter(name=target).first() if target else None
    if target and profile is None:
        form = form_for(None, request.POST)
        form.is_valid()
        form.add_error(None, _("No profile %(name)s.") % {"name": target})
        return False, ("", form)
    form = form_for(profile, request.POST)
    if not form.is_valid():
        return False, (target, form)
    name = profile.name if profile is not None else form.cleaned_data["name"]
    try:
        profiles.save(name, form.values(), actor=audit.Actor.of(request), create=profile is None)
    except MissionError as refused:
        form.show_refusal(refused)
        return False, (target, form)
    return True, (target, form)
