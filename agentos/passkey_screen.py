"""Passkeys on the sign-in page and in Settings. Each view parses, calls one service
(`agentos.core.passkeys`) and answers: the two "options" views answer JSON to
static/passkeys.js, the others a redirect to Settings with a message."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from agentos.core import passkeys
from agentos.core.errors import DomainError
from agentos.core.shell import owner_required, signed_in


def _back() -> HttpResponse:
    return redirect(f"{reverse('console:settings')}#passkeys")


@never_cache
@require_POST
def sign_in_options(request: HttpRequest) -> JsonResponse:
    # Open to anyone, like the sign-in page: it names no account and checks nothing. The
    # password and the answer are checked together by the sign-in form (agentos.signin).
    return JsonResponse(passkeys.begin_sign_in(request))


@never_cache
@require_POST
@owner_required
@sensitive_post_parameters("code")
def enrolment_options(request: HttpRequest) -> JsonResponse:
    try:
        options = passkeys.begin_enrolment(
            request,
            user=signed_in(request),
            name=request.POST.get("name", ""),
            code=request.POST.get("code", ""),
        )
    except DomainError as error:
        return JsonResponse({"error": error.message}, status=error.status)
    return JsonResponse(options)


@require_POST
@owner_required
def add(request: HttpRequest) -> HttpResponse:
    try:
        device = passkeys.finish_enrolment(
            request, user=signed_in(request), answer=request.POST.get("answer", "")
        )
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("The passkey “%(name)s” is added.") % {"name": device.name})
    return _back()


@require_POST
@owner_required
@sensitive_post_parameters("code")
def remove(request: HttpRequest, device_id: int) -> HttpResponse:
    try:
        passkeys.remove_passkey(
            request, user=signed_in(request), device_id=device_id, code=request.POST.get("code", "")
        )
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("The passkey is removed."))
    return _back()
