"""The site's error answers (`handler400`, `403`, `404`, `500` in `agentos.urls`): a page in the
console's shell, or under /api/v1 the API's JSON error (`agentos.api.error_response`), so a script
never parses HTML and a phone never gets Django's bare desktop page."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import loader
from django.utils.translation import gettext as _

from agentos import api


def _page(request: HttpRequest, status: int, heading: str, message: str) -> HttpResponse:
    context = {"status": status, "heading": heading, "message": message}
    return render(request, "console/error.html", context, status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # Django answers a body over DATA_UPLOAD_MAX_MEMORY_SIZE as a 400 (a SuspiciousOperation):
    # it is a 413, and the owner should learn the limit.
    if isinstance(exception, RequestDataTooBig):
        if api.is_api_request(request):
            return api.body_too_large(request)
        return _page(
            request,
            413,
            _("What you sent is too large"),
            _("The limit is %(limit)s. Send less at once, for instance a shorter text.")
            % {"limit": api.body_limit()},
        )
    if api.is_api_request(request):
        return api.status_error(request, 400)
    return _page(
        request,
        400,
        _("This request could not be read"),
        _("Go back, reload the page and try again."),
    )


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if api.is_api_request(request):
        return api.status_error(request, 403)
    return _page(
        request,
        403,
        _("You cannot open this page"),
        _("It is reserved to the owner of this agentos."),
    )


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if api.is_api_request(request):
        return api.status_error(request, 404)
    return _page(
        request,
        404,
        _("This page does not exist"),
        _("The address may be mistyped, or what it showed was deleted."),
    )


def server_error(request: HttpRequest) -> HttpResponse:
    if api.is_api_request(request):
        return api.status_error(request, 500)
    # No request context: its processors read the session and the database, often the very
    # thing that failed. The page renders from the template and static files alone.
    context: dict[str, Any] = {
        "status": 500,
        "heading": _("Something went wrong"),
        "message": _(
            "agentos could not show this page; the error was logged. Your missions keep "
            "running. Try again in a moment."
        ),
    }
    return HttpResponse(loader.render_to_string("console/error.html", context), status=500)
