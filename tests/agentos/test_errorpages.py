"""The console's own error pages: inside the console shell, readable on a phone, in plain words."""

from __future__ import annotations

from django.test import Client, RequestFactory
from pytest_django.fixtures import Settings

from agentos import errorpages, urls

# What a page rendered by our shell always has: the viewport (no 980 px desktop layout on a
# phone), the one stylesheet, the top bar.
SHELL = (
    '<meta name="viewport" content="width=device-width, initial-scale=1, viewport-fit=cover">',
    "/static/console.css",
    'class="topbar"',
)


def test_the_site_routes_its_errors_to_our_pages() -> None:
    assert urls.handler400 == "agentos.errorpages.bad_request"
    assert urls.handler403 == "agentos.errorpages.permission_denied"
    assert urls.handler404 == "agentos.errorpages.not_found"
    assert urls.handler500 == "agentos.errorpages.server_error"


def test_an_unknown_page_is_a_styled_404_in_the_shell(owner_client: Client) -> None:
    response = owner_client.get("/missions/999999/no-such-page/")

    assert response.status_code == 404
    html = response.content.decode()
    for part in SHELL:
        assert part in html
    assert "This page does not exist" in html
    assert 'href="/"' in html
    # Signed in: the tab bar is there, so the owner can go on from here.
    assert 'class="tabbar"' in html


def test_a_stranger_gets_the_404_without_the_owners_navigation(db: None) -> None:
    response = Client().get("/no/such/page/")

    assert response.status_code == 404
    assert 'class="tabbar"' not in response.content.decode()
    assert "This page does not exist" in response.content.decode()


def test_the_500_page_is_in_the_shell_and_needs_no_database() -> None:
    # No `db` fixture: a 500 often means the database is away; the page must still render.
    response = errorpages.server_error(RequestFactory().get("/missions/"))

    assert response.status_code == 500
    html = response.content.decode()
    for part in SHELL:
        assert part in html
    assert "Something went wrong" in html
    assert "Traceback" not in html


def test_a_console_form_over_the_size_limit_is_answered_413(db: None, settings: Settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048

    response = Client().post("/login/", {"username": "owner", "password": "x" * 5000})

    assert response.status_code == 413
    html = response.content.decode()
    assert 'class="topbar"' in html
    assert "too large" in html
    assert "2.0 KB" in html
