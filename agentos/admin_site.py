"""The Django admin, reachable only from a session verified by the second factor."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django_otp.admin import OTPAdminSite


class OwnerAdminSite(OTPAdminSite):  # type: ignore[misc]  # django-otp ships no type hints
    site_header = _("agentos administration")
    site_title = _("agentos admin")
    index_title = _("Policies, budgets and records")

    def login(self, request: HttpRequest, extra_context: object = None) -> HttpResponse:
        # One sign-in page for the whole product (password and code together, rate limited).
        target = request.GET.get("next") or reverse("admin:index")
        return HttpResponseRedirect(f"{reverse('console:login')}?{urlencode({'next': target})}")

    def register(
        self,
        model_or_iterable: type[Model] | Iterable[type[Model]],
        admin_class: Any = None,
        **options: Any,
    ) -> None:
        # A single-owner product has no groups or other users to manage, and the chaos drills'
        # records are not the owner's: those stay out of the admin (settings.ADMIN_HIDDEN_MODELS).
        models = [model_or_iterable] if isinstance(model_or_iterable, type) else model_or_iterable
        shown = [m for m in models if m._meta.label_lower not in settings.ADMIN_HIDDEN_MODELS]
        if shown:
            super().register(shown, admin_class, **options)
