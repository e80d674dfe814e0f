"""The owner's screens of what they are told: the Home card's dismissals and Settings' choices
per kind (`approvals.notifications`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from agentos.core.errors import DomainError
from agentos.core.shell import owner_required
from approvals import notifications
from approvals.models import Mode, NotificationSettings, Told

HOURS = [(hour, f"{hour:02d}:00") for hour in range(24)]


class NotificationSettingsForm(forms.Form):
    """One choice per kind (off, at once, in the digest), then the digest's hour and zone."""

    digest_hour = forms.TypedChoiceField(
        label=gettext_lazy("Daily digest at"), choices=HOURS, coerce=int
    )
    time_zone = forms.CharField(
        label=gettext_lazy("Your time zone"),
        max_length=60,
        help_text=gettext_lazy("As Europe/Paris or America/New_York; the digest's hour is in it."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for kind, label in Told.choices:
            if kind == Told.DIGEST:
                continue
            choices = [
                (mode, name)
                for mode, name in Mode.choices
                if not (mode == Mode.DIGEST and kind in notifications.NO_DIGEST)
            ]
            self.fields[f"mode_{kind}"] = forms.ChoiceField(label=label, choices=choices)

    def modes(self) -> dict[str, str]:
        return {
            name.removeprefix("mode_"): str(value)
            for name, value in self.cleaned_data.items()
            if name.startswith("mode_")
        }

    def kinds(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name.startswith("mode_")]


def settings_form(prefs: NotificationSettings | None = None) -> NotificationSettingsForm:
    """The form as the owner left it (Settings renders it)."""
    prefs = prefs or notifications.preferences()
    initial: dict[str, Any] = {"digest_hour": prefs.digest_hour, "time_zone": prefs.time_zone}
    for kind in Told.values:
        initial[f"mode_{kind}"] = prefs.mode(kind)
    return NotificationSettingsForm(initial=initial)


@require_POST
@owner_required
def save_settings(request: HttpRequest) -> HttpResponse:
    form = NotificationSettingsForm(request.POST)
    if form.is_valid():
        try:
            notifications.choose(
                modes=form.modes(),
                digest_hour=form.cleaned_data["digest_hour"],
                time_zone=form.cleaned_data["time_zone"].strip(),
            )
        except DomainError as error:
            form.add_error("time_zone" if error.code == "bad_time_zone" else None, error.message)
        else:
            messages.success(request, _("Your notification choices are saved."))
            return redirect(reverse("console:settings") + "#told-settings")
    # The choices and what is wrong with them, on a page of their own (Settings holds more).
    context = {"screen": None, "told_form": form}
    return render(request, "approvals/notification_settings.html", context, status=400)


@require_POST
@owner_required
def dismiss(request: HttpRequest, notification_id: int) -> HttpResponse:
    notifications.mark_read(notification_id)
    return _home(request)


@require_POST
@owner_required
def dismiss_all(request: HttpRequest) -> HttpResponse:
    notifications.mark_read()
    return _home(request)


def _home(request: HttpRequest) -> HttpResponse:
    if request.htmx:  # type: ignore[attr-defined]  # django-htmx's middleware sets it
        return render(request, "console/home.html#told", {"told": notifications.unread()})
    return redirect(reverse("console:home") + "#told")
