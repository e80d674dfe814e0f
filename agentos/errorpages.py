"""The site's error answers (`handler400`, `403`, `404`, `500` in `agentos.urls`): a page in the
console's shell, or under /api/v1 the API's JSON error (`agentos.api.error_response`), so a script
never parses HTML and a phone never gets Django's bare desktop page.

A database that is unreachable, or a full disk, is not a bug of the page that met it: the
`database_trouble` middleware (and the 500 handler, for what a middleware raised) answer 503
with `Retry-After`, or 507, with a page that needs no database (no session, no context
processor)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.template import loader
from django.utils.translation import gettext as _

from agentos import api

logger = logging.getLogger(__name__)


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
    # Django calls this inside its `except` block: the error is at hand.
    error = sys.exception()
    if error is not None and (trouble := api.database_trouble(error)) is not None:
        return trouble_page(request, trouble)
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


def trouble_page(request: HttpRequest, trouble: api.Trouble) -> HttpResponse:
    """The database is unreachable, or the disk full: JSON under /api/v1, else a page rendered
    without the request (its context processors read the session, in the database)."""
    if api.is_api_request(request):
        return api.trouble_response(request, trouble)
    context = {"status": trouble.status, "heading": trouble.heading, "message": trouble.message}
    page = HttpResponse(
        loader.render_to_string("console/error.html", context), status=trouble.status
    )
    if trouble.status == 503:
        page["Retry-After"] = str(api.RETRY_AFTER_SECONDS)
    return page


class DatabaseTrouble:
    """Middleware: a view that met an unreachable database or a full disk answers
    `trouble_page`, logged as one line instead of a traceback per request."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        trouble = api.database_trouble(exception)
        if trouble is None:
            return None
        logger.warning("%s %s: %s: %s", request.method, request.path, trouble.code, exception)
        return trouble_page(request, trouble)
