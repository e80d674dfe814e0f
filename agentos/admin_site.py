"""The Django admin, reachable only from a session verified by the second factor."""

from __future__ import annotations

from urllib.parse import urlencode

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
