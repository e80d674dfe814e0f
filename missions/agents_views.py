"""The Agents & policies screen: which model and effort each role runs on, the global budget
(a daily spend cap, a cap on runs executing at once, a new mission's caps), the spend caps per
model provider, the domain profiles (`missions.profile_views`), and a summary of the permission
rules (edited on the Tools screen). Every change is in the security log; runs already started
keep the model they started with (a run's model is fixed for its life)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django import forms
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods

from agentos.core import audit
from agentos.core.models import AuditEvent
from agentos.core.shell import SCREENS_BY_SLUG, owner_required, signed_in
from kernel import budgets
from missions import profile_views, routing
from missions.models import ModelInfo, Role, RoleRoute
from missions.providers.registry import ready
from tools.models import Decision, PermissionRule

if TYPE_CHECKING:  # django-stubs' name for a lazily translated string
    from django.utils.functional import _StrPromise

    StrOrPromise = str | _StrPromise

MICROS = Decimal(1_000_000)
EFFORTS = [
    ("", _("provider default")),
    ("low", _("low")),
    ("medium", _("medium")),
    ("high", _("high")),
]


class RouteForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices, widget=forms.HiddenInput)
    model = forms.ChoiceField(label=_("Model"))
    effort = forms.ChoiceField(label=_("Effort"), choices=EFFORTS, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = [  # type: ignore[attr-defined]  # a ChoiceField
            (f"{info.provider}/{info.model}", f"{info.provider}/{info.model}")
            for info in ModelInfo.objects.order_by("provider", "model")
        ]


def dollars_field(label: StrOrPromise, help_text: StrOrPromise) -> forms.DecimalField:
    """An optional amount of dollars, to the micro-dollar; empty is the owner's "no cap"."""
    return forms.DecimalField(
        label=label,
        required=False,
        min_value=Decimal("0.000001"),
        max_digits=12,
        decimal_places=6,
        help_text=help_text,
        widget=forms.NumberInput(attrs={"step": "0.01", "inputmode": "decimal"}),
    )


class BudgetForm(forms.Form):
    daily_usd = forms.DecimalField(
        label=_("Daily spend cap ($)"),
        required=False,
        min_value=Decimal(0),
        max_digits=12,
        decimal_places=6,
        help_text=_("Across every mission, per UTC day; empty for none."),
        widget=forms.NumberInput(attrs={"step": "0.01", "inputmode": "decimal"}),
    )
    max_running_runs = forms.IntegerField(
        label=_("Runs executing at once, at most"),
        min_value=0,
        max_value=10_000,
        help_text=_("0 holds every run back."),
    )
    mission_usd = dollars_field(
        _("A mission's spend cap by default ($)"),
        _("For a mission that sets none; empty for none."),
    )
    mission_tokens = forms.IntegerField(
        label=_("A mission's token cap by default"),
        required=False,
        min_value=1,
        max_value=budgets.GLOBAL_CAPS["mission_tokens"],
        help_text=_("Empty for none."),
    )
    mission_minutes = forms.IntegerField(
        label=_("A mission's wall time by default (minutes)"),
        required=False,
        min_value=1,
        max_value=budgets.GLOBAL_CAPS["mission_seconds"] // 60,
        help_text=_(
            "Its run stops when this much time has passed since it started; empty for none."
        ),
    )


class ProviderCapsForm(forms.Form):
    provider = forms.ChoiceField(label=_("Provider"))
    day_usd = dollars_field(_("Spend cap a UTC day ($)"), _("Empty for none."))
    month_usd = dollars_field(_("Spend cap a UTC month ($)"), _("Empty for none."))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        named = set(ModelInfo.objects.values_list("provider", flat=True)) | set(
            budgets.provider_caps()
        )
        named.discard(budgets.EVERY)
        self.fields["provider"].choices = [  # type: ignore[attr-defined]  # a ChoiceField
            (budgets.EVERY, _("Each provider not named below")),
            *((name, name) for name in sorted(named)),
        ]


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def agents_screen(request: HttpRequest) -> HttpResponse:
    caps = budgets.global_caps()
    routes = {route.role: route for route in RoleRoute.objects.all()}
    route_forms = {role: _route_form(role, routes.get(role)) for role in Role.values}
    budget_form = BudgetForm(
        prefix="budget",
        initial={
            "daily_usd": _dollars(caps["daily_usd_micros"]),
            "max_running_runs": caps["max_running_runs"],
            "mission_usd": _dollars(caps["mission_usd_micros"]),
            "mission_tokens": caps["mission_tokens"],
            "mission_minutes": None
            if caps["mission_seconds"] is None
            else -(-caps["mission_seconds"] // 60),
        },
    )
    provider_form = ProviderCapsForm(prefix="provider")
    profile_rows = None
    status = 200
    refused: list[str] = []  # errors of a form posted for a role this page does not show
    action = request.POST.get("action")
    if request.method == "POST" and action == "route":
        posted = RouteForm(request.POST, prefix="route")
        if posted.is_valid():
            _save_route(request, posted.cleaned_data)
            return redirect("console:agents")
        role = request.POST.get("route-role", "")
        if role in route_forms:
            route_forms[role] = posted
        else:
            refused = [str(error) for error in posted.errors.get("role", [_("Unknown role.")])]
        status = 400
    elif request.method == "POST" and action == "budget":
        budget_form = BudgetForm(request.POST, prefix="budget")
        if budget_form.is_valid():
            _save_budget(request, budget_form.cleaned_data)
            return redirect("console:agents")
        status = 400
    elif request.method == "POST" and action == "provider_caps":
        provider_form = ProviderCapsForm(request.POST, prefix="provider")
        if provider_form.is_valid():
            data = provider_form.cleaned_data
            budgets.set_provider_caps(
                data["provider"],
                day=_micros(data["day_usd"]),
                month=_micros(data["month_usd"]),
                actor=audit.Actor.of(request),
            )
            return redirect("console:agents")
        status = 400
    elif request.method == "POST" and action == "profile":
        saved, as_posted = profile_views.post(request)
        if saved:
            return redirect("console:agents")
        profile_rows, status = profile_views.rows(as_posted), 400
    elif request.method == "POST":
        status = 400
    rules = PermissionRule.objects.all()
    context = {
        "screen": SCREENS_BY_SLUG["agents"],
        "roles": [
            _role_row(role, label, routes.get(role), route_forms[role])
            for role, label in Role.choices
        ],
        "route_refused": refused,
        "budget_form": budget_form,
        "provider_form": provider_form,
        "provider_caps": sorted(budgets.provider_caps().items()),
        "rule_counts": [
            (decision.label, rules.filter(decision=decision).count()) for decision in Decision
        ],
        **(profile_rows or profile_views.rows()),
    }
    return render(request, "console/agents.html", context, status=status)


def _role_row(
    role: str, label: StrOrPromise, stored: RoleRoute | None, form: RouteForm
) -> dict[str, Any]:
    """A role as its runs will take it: its default route, or the compatible endpoint standing
    in when that route's provider has no key (`routing.default_route`), and whether it can run."""
    taken = routing.default_route(role)
    stands_in = taken is not None and (stored is None or taken.provider != stored.provider)
    return {
        "label": label,
        "route": stored,
        "taken": taken if stands_in else None,
        "ready": taken is not None and (taken.provider == "scripted" or ready(taken.provider)),
        "form": form,
    }


def _route_form(role: str, route: RoleRoute | None) -> RouteForm:
    initial: dict[str, Any] = {"role": role}
    if route is not None:
        initial.update(model=f"{route.provider}/{route.model}", effort=route.effort)
    return RouteForm(prefix="route", initial=initial, auto_id=f"id_{role}_%s")


def _save_route(request: HttpRequest, data: dict[str, Any]) -> None:
    provider, model = str(data["model"]).split("/", 1)
    with transaction.atomic():
        route, _created = RoleRoute.objects.update_or_create(
            role=data["role"],
            defaults={"provider": provider, "model": model, "effort": data["effort"] or ""},
        )
        audit.record_request(
            AuditEvent.Kind.POLICY_CHANGED,
            request,
            username=signed_in(request).get_username(),
            role=route.role,
            provider=provider,
            model=model,
            effort=route.effort,
        )


def _save_budget(request: HttpRequest, data: dict[str, Any]) -> None:
    daily = data["daily_usd"]
    micros = None if daily is None else int(daily * MICROS)
    minutes = data["mission_minutes"]
    # A daily cap of 0 reads as "no cap" (kernel.metering), which the kernel spells null.
    budgets.set_global_caps(
        {
            "daily_usd_micros": micros or None,
            "max_running_runs": data["max_running_runs"],
            "mission_usd_micros": None
            if data["mission_usd"] is None
            else int(data["mission_usd"] * MICROS),
            "mission_tokens": data["mission_tokens"],
            "mission_seconds": None if minutes is None else minutes * 60,
        },
        actor=audit.Actor.of(request),
    )


def _micros(dollars: Decimal | None) -> int | None:
    return None if dollars is None else int(dollars * MICROS)


def _dollars(micros: int | None) -> Decimal | None:
    return None if micros is None else Decimal(micros) / MICROS
