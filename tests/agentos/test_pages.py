from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from django_otp import DEVICE_ID_SESSION_KEY

from agentos.core.models import ApiToken
from tests.factories import Owner

INLINE_SCRIPT = re.compile(rb"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(rb"\son[a-z]+\s*=", re.IGNORECASE)
INLINE_STYLE = re.compile(rb"<style|\sstyle\s*=", re.IGNORECASE)

PUBLIC_PAGES = [
    "/login/",
    "/offline/",
    "/manifest.webmanifest",
    "/sw.js",
    "/api/v1/health",
    "/api/v1/docs",
]
OWNER_PAGES = [
    "/",
    "/more/",
    "/settings/",
    "/admin/",
    "/cluster/",
]


def assert_strict_csp(response: object) -> None:
    policy = response["Content-Security-Policy"]  # type: ignore[index]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy


@pytest.mark.parametrize("path", PUBLIC_PAGES)
def test_it_sends_a_strict_csp_on_public_pages(client: Client, db: None, path: str) -> None:
    response = client.get(path)

    assert response.status_code in {200, 503}
    assert_strict_csp(response)


@pytest.mark.parametrize("path", OWNER_PAGES)
def test_it_sends_a_strict_csp_on_every_owner_page(owner_client: Client, path: str) -> None:
    response = owner_client.get(path)

    assert response.status_code == 200
    assert_strict_csp(response)


@pytest.mark.parametrize("path", ["/login/", "/", "/more/", "/settings/", "/missions/", "/memory/"])
def test_it_renders_pages_without_inline_script_or_style(owner_client: Client, path: str) -> None:
    content = owner_client.get(path).content

    assert not INLINE_SCRIPT.search(content)
    assert not INLINE_HANDLER.search(content)
    assert not INLINE_STYLE.search(content)


@pytest.mark.parametrize("path", ["/", "/settings/", "/missions/", "/more/"])
def test_it_sends_strangers_to_sign_in(client: Client, db: None, path: str) -> None:
    response = client.get(path)

    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_it_answers_404_for_an_unknown_screen(owner_client: Client) -> None:
    assert owner_client.get("/nonsense/").status_code == 404


def test_it_shows_real_health_on_home(owner_client: Client) -> None:
    content = owner_client.get("/").content.decode()

    assert 'data-component="database">up<' in content
    assert 'data-component="workers">unknown<' in content
    assert "no worker has reported yet" in content


def test_it_refreshes_only_the_health_card_for_htmx(owner_client: Client) -> None:
    response = owner_client.get("/", HTTP_HX_REQUEST="true")

    content = response.content.decode()
    assert content.lstrip().startswith('<section class="card" id="health"')
    assert "<html" not in content


@pytest.mark.parametrize("htmx", [True, False])
def test_a_page_that_answers_htmx_with_a_card_tells_caches_it_varies(
    owner_client: Client, htmx: bool
) -> None:
    """Else a phone going back to Home could be shown the card its cache kept, not the page."""
    response = owner_client.get("/", headers={"HX-Request": "true"} if htmx else {})

    assert "HX-Request" in [name.strip() for name in response["Vary"].split(",")]


def test_it_creates_shows_once_and_revokes_a_token_from_settings(owner_client: Client) -> None:
    created = owner_client.post(
        "/settings/", {"name": "phone shortcut", "scopes": ["read", "act"], "days": "90"}
    )

    assert created.status_code == 200
    secret = re.search(r'id="new-token">(aos_[^<]+)<', created.content.decode())
    assert secret
    assert secret.group(1) not in owner_client.get("/settings/").content.decode()
    token_id = created.context["tokens"][0].pk
    assert owner_client.post(f"/settings/tokens/{token_id}/revoke").status_code == 302
    assert "revoked" in owner_client.get("/settings/").content.decode()


def test_it_offers_read_and_act_for_90_days_and_approve_only_when_ticked(
    owner_client: Client,
) -> None:
    form = owner_client.get("/settings/").content.decode()
    assert re.search(r'<input[^>]*value="read"[^>]*checked', form)
    assert re.search(r'<input[^>]*value="act"[^>]*checked', form)
    assert not re.search(r'<input[^>]*value="approve"[^>]*checked', form)
    assert re.search(r'<input[^>]*name="days"[^>]*value="90"', form)

    created = owner_client.post(
        "/settings/", {"name": "phone", "scopes": ["read", "approve"], "days": "7"}
    )

    token = ApiToken.objects.get()
    assert token.scopes == ["read", "approve"]
    assert token.expires_at.date() == (timezone.now() + timedelta(days=7)).date()
    page = created.content.decode()
    assert "read, approve" in page
    assert token.expires_at.strftime("%Y-%m-%d") in page


def test_it_refuses_a_token_without_a_scope_from_settings(owner_client: Client) -> None:
    response = owner_client.post("/settings/", {"name": "nothing", "days": "90"})

    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_it_refuses_a_token_without_a_name_from_settings(owner_client: Client) -> None:
    response = owner_client.post("/settings/", {"name": "   "})

    assert response.status_code == 400
    assert "This field is required." in response.content.decode()


def test_it_serves_an_installable_manifest(client: Client, db: None) -> None:
    manifest = client.get("/manifest.webmanifest").json()

    assert manifest["display"] == "standalone"
    sizes = {icon["sizes"] for icon in manifest["icons"]}
    assert {"192x192", "512x512"} <= sizes
    for icon in manifest["icons"]:
        assert client.get(icon["src"]).status_code == 200


def test_it_serves_the_service_worker_from_the_root(client: Client, db: None) -> None:
    response = client.get("/sw.js")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/javascript"


@pytest.mark.django_db
def test_a_verified_account_that_is_not_the_owner_is_refused(owner: Owner) -> None:
    """agentos has one owner: another account, even with its own second factor, gets nothing."""
    from django.contrib.auth.models import User
    from django_otp.plugins.otp_totp.models import TOTPDevice

    other = User.objects.create_user("guest", password="a long enough password")
    device = TOTPDevice.objects.create(user=other, name="guest", confirmed=True)
    client = Client()
    client.force_login(other)
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.save()

    assert client.get("/").status_code == 302
    assert client.get("/api/v1/me").status_code == 401
