"""The Webhooks screen: the owner's endpoints (created here with a template's main fields, their
URL and secret shown once), each one's deliveries with what they became, a Replay button on
the failed ones, and deletion after a confirmation. It calls what the API calls
(`missions.webhooks`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agentos.core import audit
from agentos.core.errors import DomainError
from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from missions import launch, webhooks
from missions.forms import profile_choices
from missions.models import Project, Webhook, WebhookPreset
from tools import levels

# Form field <- the template's field, for the refusals `blueprints.clean` names.
FIELDS = {
    "name": "name",
    "preset": "preset",
    "project_id": "project",
    "goal": "goal",
    "definition_of_done": "definition_of_done",
    "risk_class": "risk_class",
    "profile": "profile",
}


class WebhookForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=webhooks.MAX_NAME)
    preset = forms.ChoiceField(
        label=_("Signed as"),
        choices=WebhookPreset.choices,
        initial=WebhookPreset.AGENTOS,
        help_text=_(
            "agentos: X-Agentos-Signature with a timestamp (refused after 5 minutes);"
            " GitHub: X-Hub-Signature-256, as GitHub sends it."
        ),
    )
    project = forms.ModelChoiceField(
        label=_("Project"), queryset=Project.objects.order_by("name"), empty_label=None
    )
    goal = forms.CharField(
        label=_("Goal"),
        max_length=launch.MAX_GOAL,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_(
            "What each delivery's mission should achieve. The payload follows it as untrusted"
            " data, never as your words."
        ),
    )
    definition_of_done = forms.CharField(
        label=_("Definition of done"),
        required=False,
        max_length=launch.MAX_GOAL,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    risk_class = forms.ChoiceField(
        label=_("Risk class"),
        choices=[(name, name) for name in levels.RISK_CLASSES],
        initial=levels.DEFAULT_RISK_CLASS,
        help_text=_("research: read-only; code: commands in a sandbox; untrusted: each in a VM."),
    )
    profile = forms.ChoiceField(label=_("Profile"), required=False, choices=profile_choices)


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
def webhooks_screen(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(request.POST or None)
    if request.method != "POST":
        return _screen(request, form=form)
    if not form.is_valid():
        return _screen(request, form=form, status=400)
    data = form.cleaned_data
    template: dict[str, Any] = {
        "project_id": data["project"].pk,
        "goal": data["goal"],
        "risk_class": data["risk_class"],
    }
    if data["definition_of_done"]:
        template["definition_of_done"] = data["definition_of_done"]
    if data.get("profile"):
        template["profile"] = data["profile"]
    try:
        created = webhooks.create(
            name=data["name"],
            mission=template,
            preset=data["preset"],
            actor=audit.Actor.of(request),
        )
    except DomainError as refused:
        _add_errors(form, refused)
        return _screen(request, form=form, status=refused.status)
    return _screen(request, form=WebhookForm(), created=created)


def _add_errors(form: WebhookForm, refused: DomainError) -> None:
    fields = refused.details.get("fields") if isinstance(refused.details, dict) else None
    if not isinstance(fields, dict) or not fields:
        form.add_error(None, refused.message)
        return
    for where, said in fields.items():
        field = FIELDS.get(str(where).split(".")[0])
        for message in said:
            form.add_error(field, f"{where}: {message}" if field is None else message)


def _screen(
    request: HttpRequest,
    *,
    form: WebhookForm,
    created: webhooks.Created | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "screen": SCREENS_BY_SLUG["webhooks"],
        "webhooks": [
            {"webhook": webhook, "failed": webhooks.failed_count(webhook)}
            for webhook in webhooks.listed()
        ],
        "form": form,
        "created": created,
        "created_url": _url(request, created.webhook) if created else "",
    }
    return render(request, "missions/webhooks.html", context, status=status)


def _url(request: HttpRequest, webhook: Webhook) -> str:
    return request.build_absolute_uri(reverse("console:webhook-receive", args=[webhook.key]))


@require_safe
@owner_required
def webhook_detail(request: HttpRequest, webhook_id: int) -> HttpResponse:
    return _detail(request, _webhook(webhook_id), confirm=request.GET.get("confirm") == "delete")


def _detail(
    request: HttpRequest,
    webhook: Webhook,
    *,
    confirm: bool = False,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "screen": SCREENS_BY_SLUG["webhooks"],
        "webhook": webhook,
        "url": _url(request, webhook),
        "deliveries": webhooks.deliveries(webhook),
        "confirm_delete": confirm,
        "error": error,
    }
    return render(request, "missions/webhook.html", context, status=status)


def _webhook(webhook_id: int) -> Webhook:
    try:
        return webhooks.get(webhook_id)
    except webhooks.WebhookError:
        raise Http404 from None


@require_POST
@owner_required
def webhook_delete(request: HttpRequest, webhook_id: int) -> HttpResponse:
    """Delete only with `confirm=yes` (the second button): without it, ask first."""
    webhook = _webhook(webhook_id)
    if request.POST.get("confirm") != "yes":
        return redirect(f"{reverse('console:webhook', args=[webhook.pk])}?confirm=delete#delete")
    webhooks.delete(webhook.pk, actor=audit.Actor.of(request))
    return redirect("console:webhooks")


@require_POST
@owner_required
def webhook_replay(request: HttpRequest, webhook_id: int, delivery_pk: int) -> HttpResponse:
    webhook = _webhook(webhook_id)
    delivery = webhook.deliveries.filter(pk=delivery_pk).first()
    if delivery is None:
        raise Http404
    try:
        outcome = webhooks.replay(webhook, delivery, actor=audit.Actor.of(request))
    except webhooks.WebhookError as refused:
        return _detail(request, webhook, error=refused.message, status=refused.status)
    if outcome.failure is not None:
        return _detail(request, webhook, error=outcome.failure.message, status=409)
    return redirect(f"{reverse('console:webhook', args=[webhook.pk])}#deliveries")
