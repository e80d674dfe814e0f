"""The provider part of the Settings page: keys (write-only), the OpenAI-compatible endpoint, and
a Test button per provider.

An interface only: keys and the endpoint change through `missions.actions` (the API's path),
the test goes through `missions.provider_trial`. A key is never rendered back:
its field is a password input that does not re-render its value, even when the form is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agentos.core import audit
from missions import actions, endpoints, keys, routing
from missions.errors import MissionError
from missions.models import ModelInfo, RoleRoute
from missions.provider_trial import Trial, try_provider
from missions.providers import registry

# Display order: the two clouds, then the owner's own server.
PROVIDERS = ("anthropic", "openai", "compatible")
LABELS = {
    "anthropic": gettext_lazy("Anthropic"),
    "openai": gettext_lazy("OpenAI"),
    "compatible": gettext_lazy("OpenAI-compatible endpoint"),
}
# The POST fields holding a key: hidden from Django's error reports (`sensitive_post_parameters`).
KEY_FIELDS = tuple(f"{provider}-key" for provider in PROVIDERS)
ACTIONS = ("save_key", "forget_key", "save_endpoint", "forget_endpoint", "test")


def _key_field(*, required: bool) -> forms.CharField:
    return forms.CharField(
        label=gettext_lazy("API key"),
        required=required,
        max_length=500,
        # render_value=False: a refused form comes back with the field empty, never the key.
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "off", "spellcheck": "false"}
        ),
        error_messages={"required": gettext_lazy("Paste the key.")},
    )


def _check_key(value: str) -> str:
    value = value.strip()
    if value and any(c.isspace() for c in value):
        raise forms.ValidationError(_("A key has no spaces or line breaks: paste it again."))
    if value and len(value) < 8:
        raise forms.ValidationError(_("This is too short to be a key (8 characters at least)."))
    return value


class ProviderKeyForm(forms.Form):
    key = _key_field(required=True)

    def clean_key(self) -> str:
        return _check_key(self.cleaned_data["key"])


class EndpointForm(forms.Form):
    base_url = forms.CharField(
        label=gettext_lazy("Base URL"),
        max_length=endpoints.MAX_URL,
        help_text=gettext_lazy(
            "Where the server answers Chat Completions, e.g. http://127.0.0.1:8080/v1 "
            "(llama.cpp), http://127.0.0.1:8000/v1 (vLLM), http://127.0.0.1:11434/v1 (Ollama)."
        ),
        widget=forms.URLInput(
            attrs={"inputmode": "url", "autocomplete": "off", "spellcheck": "false"}
        ),
    )
    model = forms.CharField(
        label=gettext_lazy("Model"),
        max_length=endpoints.MAX_MODEL,
        help_text=gettext_lazy("The name the server knows it by, e.g. qwen2.5-coder:32b."),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    context_window = forms.IntegerField(
        label=gettext_lazy("Context window (tokens, optional)"),
        required=False,
        min_value=1024,
        max_value=10_000_000,
        help_text=gettext_lazy(
            "How much the server lets the model read; leave empty if unknown. Runs compact "
            "their context before they reach it."
        ),
    )
    key = _key_field(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["key"].help_text = gettext_lazy(
            "Optional: only if the server asks for one. Empty keeps the key already set."
        )

    def clean_base_url(self) -> str:
        try:
            return endpoints.clean_url(self.cleaned_data["base_url"])
        except MissionError as error:
            raise forms.ValidationError(error.message) from None

    def clean_model(self) -> str:
        try:
            return endpoints.clean_model(self.cleaned_data["model"])
        except MissionError as error:
            raise forms.ValidationError(error.message) from None

    def clean_key(self) -> str:
        return _check_key(self.cleaned_data.get("key") or "")


@dataclass
class ProviderState:
    name: str
    label: str
    key_source: str | None  # "environment", "console" or None: not set
    key_set_on: datetime | None
    env_variable: str
    ready: bool
    routes: list[str]
    form: forms.Form
    endpoint: endpoints.Endpoint | None = None
    trial: Trial | None = None

    @property
    def key_optional(self) -> bool:
        return self.name in registry.KEY_OPTIONAL


@dataclass
class Panel:
    """What the page shows of providers, and how a provider POST went (`posted`, `status`)."""

    providers: list[ProviderState] = field(default_factory=list)
    posted: bool = False
    status: int = 200


def handle(request: HttpRequest) -> Panel | HttpResponse:
    """A provider POST (it carries `action`) is acted on: a save or forget redirects back with a
    flash message, a test or a refused form renders the page; anything else only reads."""
    bound: dict[str, forms.Form] = {}
    trial: Trial | None = None
    status = 200
    action = request.POST.get("action") if request.method == "POST" else None
    provider = request.POST.get("provider", "")
    if action is not None:
        if action not in ACTIONS or provider not in PROVIDERS:
            messages.error(request, _("That settings action is not known."))
            return redirect("console:settings")
        outcome = _act(request, action, provider)
        if isinstance(outcome, HttpResponse):
            return outcome
        if isinstance(outcome, Trial):
            trial = outcome
        else:
            bound[provider] = outcome
            status = 400
    return Panel(providers=_states(bound, trial), posted=action is not None, status=status)


def _act(request: HttpRequest, action: str, provider: str) -> HttpResponse | Trial | forms.Form:
    label = str(LABELS[provider])
    actor = audit.Actor.of(request)
    if action == "test":
        return try_provider(provider)
    if action == "forget_key":
        actions.forget_provider_key(provider=provider, actor=actor)
        messages.success(
            request, _("%(provider)s: the stored key is forgotten.") % {"provider": label}
        )
        return redirect("console:settings")
    if action == "forget_endpoint":
        actions.remove_endpoint(actor=actor)
        messages.success(request, _("The compatible endpoint is removed."))
        return redirect("console:settings")
    if action == "save_endpoint":
        form: forms.Form = EndpointForm(request.POST, prefix=provider)
        if not form.is_valid():
            return form
        try:
            actions.set_endpoint(
                base_url=form.cleaned_data["base_url"],
                model=form.cleaned_data["model"],
                context_window=form.cleaned_data["context_window"],
                key=form.cleaned_data["key"],
                actor=actor,
            )
        except MissionError as error:
            form.add_error(None, error.message)
            return form
        messages.success(request, _("The compatible endpoint is saved."))
        return redirect("console:settings")
    form = ProviderKeyForm(request.POST, prefix=provider)
    if not form.is_valid():
        return form
    try:
        actions.set_provider_key(provider=provider, key=form.cleaned_data["key"], actor=actor)
    except MissionError as error:
        form.add_error("key", error.message)
        return form
    messages.success(request, _("%(provider)s: the key is saved.") % {"provider": label})
    return redirect("console:settings")


def _states(bound: dict[str, forms.Form], trial: Trial | None) -> list[ProviderState]:
    status = {item["provider"]: item for item in keys.status()}
    routes: dict[str, list[str]] = {}
    # The routes roles take now: a default whose provider is not set goes to the endpoint.
    for stored in RoleRoute.objects.order_by("role"):
        route = routing.default_route(stored.role)
        provider = route.provider if route is not None else stored.provider
        routes.setdefault(provider, []).append(stored.get_role_display())
    endpoint = endpoints.get()
    states = []
    for name in PROVIDERS:
        item = status[name]
        form = bound.get(name)
        if form is None and name == endpoints.PROVIDER:
            initial: dict[str, Any] = {}
            if endpoint is not None:
                known = ModelInfo.objects.filter(provider=name, model=endpoint.model).first()
                initial = {
                    "base_url": endpoint.base_url,
                    "model": endpoint.model,
                    "context_window": known.context_window if known else None,
                }
            form = EndpointForm(prefix=name, initial=initial)
        elif form is None:
            form = ProviderKeyForm(prefix=name)
        updated = item["updated_at"]
        states.append(
            ProviderState(
                name=name,
                label=str(LABELS[name]),
                key_source=item["source"] if isinstance(item["source"], str) else None,
                key_set_on=updated if isinstance(updated, datetime) else None,
                env_variable=registry.KEYS[name],
                ready=registry.ready(name),
                routes=routes.get(name, []),
                form=form,
                endpoint=endpoint if name == endpoints.PROVIDER else None,
                trial=trial if trial is not None and trial.provider == name else None,
            )
        )
    return states
