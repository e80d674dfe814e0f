"""Pages that answer htmx with a part of themselves say so to the browser's cache."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_vary_headers


class VaryOnHtmx:
    """Every response varies on `HX-Request`: one URL answers htmx with a card and a navigation
    with the whole page (Home, a run, the queue), and without the header a browser going back
    to the page may show it the card it cached last, alone on the screen."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        patch_vary_headers(response, ("HX-Request",))
        return response
