"""Settings' security and notifications: the owner's sessions, second-factor devices and Web
Push subscriptions. Each view parses, calls one service (`agentos.core.security_settings`,
`approvals.push`) and answers; a refusal comes back as a message on the Settings page."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from agentos.core import audit, security_settings
from agentos.core.errors import DomainError
from agentos.core.shell import owner_required, signed_in
from agentos.views import settings_page
from approvals import push, push_sender

# The console posts a subscription as JSON; one is well under this.
MAX_SUBSCRIPTION_BYTES = 4096


def _back(anchor: str) -> HttpResponse:
    return redirect(f"{reverse('console:settings')}#{anchor}")


@require_POST
@owner_required
def sign_out_others(request: HttpRequest) -> HttpResponse:
    ended = security_settings.sign_out_others(request, user=signed_in(request))
    messages.success(
        request,
        ngettext(
            "%(count)d other session signed out.", "%(count)d other sessions signed out.", ended
        )
        % {"count": ended},
    )
    return _back("sessions")


@require_POST
@owner_required
@sensitive_post_parameters("code")
def add_authenticator(request: HttpRequest) -> HttpResponse:
    try:
        security_settings.start_authenticator(
            request,
            user=signed_in(request),
            name=request.POST.get("name", ""),
            code=request.POST.get("code", ""),
        )
    except DomainError as error:
        messages.error(request, error.message)
        return _back("authenticators")
    messages.success(
        request, _("Scan the code with the new app, then enter the code it shows to confirm.")
    )
    return _back("authenticators")


@require_POST
@owner_required
@sensitive_post_parameters("code")
def confirm_authenticator(request: HttpRequest, device_id: int) -> HttpResponse:
    try:
        security_settings.confirm_authenticator(
            request, user=signed_in(request), device_id=device_id, code=request.POST.get("code", "")
        )
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("The new authenticator is added."))
    return _back("authenticators")


@require_POST
@owner_required
def cancel_authenticator(request: HttpRequest, device_id: int) -> HttpResponse:
    security_settings.cancel_authenticator(user=signed_in(request), device_id=device_id)
    return _back("authenticators")


@require_POST
@owner_required
@sensitive_post_parameters("code")
def remove_authenticator(request: HttpRequest, device_id: int) -> HttpResponse:
    try:
        security_settings.remove_authenticator(
            request, user=signed_in(request), device_id=device_id, code=request.POST.get("code", "")
        )
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("The authenticator is removed."))
    return _back("authenticators")


@never_cache
@require_POST
@owner_required
@sensitive_post_parameters("code")
def renew_backup_codes(request: HttpRequest) -> HttpResponse:
    try:
        codes = security_settings.renew_backup_codes(
            request, user=signed_in(request), code=request.POST.get("code", "")
        )
    except DomainError as error:
        messages.error(request, error.message)
        return _back("backup-codes")
    # Rendered, not redirected: the codes exist in clear only in this one answer.
    return settings_page(request, backup_codes=codes)


@require_POST
@owner_required
def subscribe(request: HttpRequest) -> HttpResponse:
    if len(request.body) > MAX_SUBSCRIPTION_BYTES:
        return JsonResponse({"error": _("This is not a push subscription.")}, status=400)
    try:
        subscription = json.loads(request.body)
        push.subscribe(
            subscription=subscription,
            agent=request.headers.get("User-Agent", ""),
            username=signed_in(request).get_username(),
            address=audit.client_address(request),
        )
    except ValueError:
        return JsonResponse({"error": _("This is not a push subscription.")}, status=400)
    except DomainError as error:
        return JsonResponse({"error": error.message}, status=error.status)
    return JsonResponse({"subscribed": True}, status=201)


@require_POST
@owner_required
def unsubscribe(request: HttpRequest) -> HttpResponse:
    try:
        endpoint = json.loads(request.body).get("endpoint") if request.body else None
    except (ValueError, AttributeError):
        endpoint = None
    if not isinstance(endpoint, str):
        endpoint = request.POST.get("endpoint", "")
    removed = push.unsubscribe(
        endpoint=endpoint,
        username=signed_in(request).get_username(),
        address=audit.client_address(request),
    )
    if request.content_type == "application/json":
        return JsonResponse({"unsubscribed": removed})
    return _back("notifications")


@require_POST
@owner_required
def test_notification(request: HttpRequest) -> HttpResponse:
    sent = push.send_test()
    if sent.delivered:
        messages.success(
            request,
            ngettext(
                "Test notification sent to %(count)d device.",
                "Test notification sent to %(count)d devices.",
                sent.delivered,
            )
            % {"count": sent.delivered},
        )
    if sent.failed or not sent.delivered:
        messages.error(
            request,
            _("No device could be reached. Turn notifications on from the installed app first.")
            if not sent.failed
            else ngettext(
                "%(count)d device could not be reached; try again later.",
                "%(count)d devices could not be reached; try again later.",
                sent.failed,
            )
            % {"count": sent.failed},
        )
    return _back("notifications")


@require_POST
@owner_required
def push_sender_contact(request: HttpRequest) -> HttpResponse:
    """The contact push services may write to (Settings, "Push sender")."""
    form = push_sender.ContactForm(request.POST)
    if not form.is_valid():
        return settings_page(request, push_sender_form=form, status=400)
    push_sender.set_contact(contact=form.cleaned_data["contact"], actor=audit.Actor.of(request))
    messages.success(request, _("The push sender's contact is saved."))
    return _back("push-sender")
