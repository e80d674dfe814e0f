"""Console pages of the shell: sign-in, Home, settings (API tokens), PWA files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.contrib.auth import logout
from django.contrib.staticfiles import finders
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from agentos import health, signin
from agentos.core import audit, owner, passkeys, security_settings, tokens
from agentos.core.errors import DomainError
from agentos.core.models import ApiToken, AuditEvent
from agentos.core.shell import SCREENS_BY_SLUG, owner_required, signed_in
from agentos.forms import SignInForm, TokenForm
from approvals import inbox, notice_views, notifications, push, push_sender
from missions import costs, overview, provider_views, search


@never_cache
@require_http_methods(["GET", "HEAD", "POST"])
@sensitive_post_parameters("password", "code", "passkey")
def login_view(request: HttpRequest) -> HttpResponse:
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = ""
    form = SignInForm(request.POST or None)
    error = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                signin.sign_in(
                    request,
                    username=form.cleaned_data["username"],
                    password=form.cleaned_data["password"],
                    code=form.cleaned_data["code"],
                    passkey=form.cleaned_data["passkey"],
                )
            except signin.SignInRefused as refused:
                error, status = refused.message, refused.status
            else:
                return redirect(next_url or "console:home")
        else:
            status = 400
    elif owner.is_verified_owner(request.user):
        return redirect(next_url or "console:home")
    context = {
        "form": form,
        "error": error,
        "next": next_url,
        "expired": request.GET.get("expired") == "1",
    }
    return render(request, "console/login.html", context, status=status)


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        audit.record_request(
            AuditEvent.Kind.SIGNED_OUT, request, username=request.user.get_username()
        )
    logout(request)
    return redirect("console:login")


# Home's cards and what each collects, in page order.
HOME_CARDS: dict[str, Callable[[], object]] = {
    "waiting": inbox.waiting,
    "told": notifications.unread,
    "running": overview.running,
    "spend": costs.today,
    "health": health.check,
}


@require_safe
@owner_required
def home(request: HttpRequest) -> HttpResponse:
    # htmx refreshes one card at a time, named by its id (HX-Target); unnamed means health.
    card = None
    if request.htmx:  # type: ignore[attr-defined]
        target = request.htmx.target  # type: ignore[attr-defined]
        card = target if target in HOME_CARDS else "health"
    context: dict[str, Any] = {"screen": SCREENS_BY_SLUG["home"]}
    for name, collect in HOME_CARDS.items():
        if card in (None, name):
            context[name] = collect()
    template = f"console/home.html#{card}" if card else "console/home.html"
    return render(request, template, context)


@require_safe
@owner_required
def more(request: HttpRequest) -> HttpResponse:
    return render(request, "console/more.html", {"screen": None})


@require_http_methods(["GET", "HEAD", "POST"])
@owner_required
@sensitive_post_parameters(*provider_views.KEY_FIELDS)
def settings_view(request: HttpRequest) -> HttpResponse:
    # Provider keys, the compatible endpoint and tests post here too, told apart by `action`.
    providers = provider_views.handle(request)
    if isinstance(providers, HttpResponse):
        return providers
    token_post = request.method == "POST" and not providers.posted
    form = TokenForm(request.POST if token_post else None)
    created: tokens.NewToken | None = None
    status = providers.status
    if token_post:
        if form.is_valid():
            try:
                created = tokens.create_token(
                    owner=signed_in(request),
                    name=form.cleaned_data["name"],
                    scopes=form.cleaned_data["scopes"],
                    days=form.cleaned_data["days"],
                    address=audit.client_address(request),
                )
                form = TokenForm()
            except DomainError as error:
                form.add_error("name", error.message)
                status = 400
        else:
            status = 400
    return settings_page(
        request,
        form=form,
        created=created,
        providers=providers.providers,
        status=status,
    )


def settings_page(
    request: HttpRequest,
    *,
    form: TokenForm | None = None,
    created: tokens.NewToken | None = None,
    providers: list[Any] | None = None,
    backup_codes: list[str] | None = None,
    push_sender_form: push_sender.ContactForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The Settings page; `backup_codes` are new codes to show this once (never stored in clear,
    never in a redirect)."""
    user = signed_in(request)
    if providers is None:
        # Read only: the pages that call this post no provider `action`.
        panel = provider_views.handle(request)
        providers = [] if isinstance(panel, HttpResponse) else panel.providers
    context = {
        "screen": SCREENS_BY_SLUG["settings"],
        "form": form or TokenForm(),
        "created": created,
        "tokens": ApiToken.objects.filter(owner=user),
        "providers": providers,
        "web_search": search.get(),
        "sessions": security_settings.sessions_of(user, current_key=request.session.session_key),
        "authenticators": security_settings.authenticators(user),
        "pending_authenticators": security_settings.pending(user),
        "passkeys": passkeys.passkeys(user),
        "backup_codes_left": security_settings.unused_backup_codes(user),
        "backup_codes": backup_codes,
        "push_public_key": push.public_key(),
        "push_subscriptions": push.subscriptions(),
        "push_sender": push_sender.panel(push_sender_form),
        "told_form": notice_views.settings_form(),
    }
    return render(request, "console/settings.html", context, status=status)


@require_POST
@owner_required
def revoke_token_view(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        tokens.revoke_token(
            owner=signed_in(request),
            token_id=token_id,
            address=audit.client_address(request),
        )
    except DomainError as error:
        raise Http404(error.message) from None
    return redirect("console:settings")


# --- PWA ----------------------------------------------------------------------------------------


@require_safe
def manifest(request: HttpRequest) -> HttpResponse:
    return render(request, "console/manifest.webmanifest", content_type="application/manifest+json")


@require_safe
def service_worker(request: HttpRequest) -> FileResponse:
    # Served from the root so that its scope is the whole console.
    path = finders.find("sw.js")
    if not path:
        raise Http404("sw.js is missing from static/")
    # FileResponse closes the file once it is sent.
    response = FileResponse(Path(path).open("rb"), content_type="text/javascript")  # noqa: SIM115
    response["Cache-Control"] = "no-cache"
    return response


@require_safe
def offline(request: HttpRequest) -> HttpResponse:
    return render(request, "console/offline.html")
