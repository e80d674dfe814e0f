from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import SESSION_KEY
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agentos.models import AuditEvent
from tests.factories import Owner, verified_client

LOGIN = "/login/"


def sign_in(client: Client, owner: Owner, *, password: str | None = None, code: str = "") -> int:
    response = client.post(
        LOGIN,
        {"username": owner.username, "password": password or owner.password, "code": code},
    )
    return response.status_code


def last_event() -> AuditEvent:
    event = AuditEvent.objects.first()
    assert event is not None
    return event


def test_it_refuses_a_password_without_second_factor(client: Client, owner: Owner) -> None:
    response = client.post(LOGIN, {"username": owner.username, "password": owner.password})

    assert response.status_code == 400
    assert b"Enter the code from your authenticator app" in response.content
    assert last_event().detail["reason"] == "missing_second_factor"
    assert SESSION_KEY not in client.session
    assert client.get("/").status_code == 302


def test_it_signs_in_with_password_and_totp(client: Client, owner: Owner) -> None:
    response = client.post(
        LOGIN, {"username": owner.username, "password": owner.password, "code": owner.code()}
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    home = client.get("/")
    assert home.status_code == 200
    assert b"Health" in home.content
    assert last_event().kind == AuditEvent.Kind.SIGNIN_SUCCEEDED


def test_it_refuses_a_wrong_password_even_with_a_good_code(client: Client, owner: Owner) -> None:
    response = client.post(
        LOGIN, {"username": owner.username, "password": "not-the-password", "code": owner.code()}
    )

    assert response.status_code == 401
    assert b"Wrong username or password." in response.content
    assert SESSION_KEY not in client.session
    assert last_event().detail["reason"] == "bad_password"


def test_it_refuses_a_wrong_code(client: Client, owner: Owner) -> None:
    wrong = f"{(int(owner.code()) + 1) % 1_000_000:06d}"

    assert sign_in(client, owner, code=wrong) == 401
    assert SESSION_KEY not in client.session
    assert last_event().detail["reason"] == "bad_code"


def test_it_refuses_a_replayed_code(client: Client, owner: Owner) -> None:
    code = owner.code()
    assert sign_in(client, owner, code=code) == 302

    other = Client()
    assert sign_in(other, owner, code=code) == 401
    assert SESSION_KEY not in other.session


def test_it_accepts_each_backup_code_once(client: Client, owner: Owner) -> None:
    backup = owner.credentials.backup_codes[0]

    assert sign_in(client, owner, code=backup) == 302
    assert sign_in(Client(), owner, code=backup) == 401


def test_it_throttles_repeated_failures_with_a_clear_message(client: Client, owner: Owner) -> None:
    for _ in range(5):
        assert sign_in(client, owner, password="wrong-password", code="000000") == 401

    response = client.post(
        LOGIN, {"username": owner.username, "password": owner.password, "code": owner.code()}
    )

    assert response.status_code == 429
    assert b"Too many failed sign-in attempts. Try again in 15 minute(s)." in response.content
    assert SESSION_KEY not in client.session
    assert last_event().kind == AuditEvent.Kind.SIGNIN_THROTTLED


def test_it_lets_the_owner_in_again_once_failures_leave_the_window(
    client: Client, owner: Owner
) -> None:
    for _ in range(5):
        sign_in(client, owner, password="wrong-password", code="000000")

    with time_machine.travel(timezone.now() + timedelta(minutes=16)):
        assert sign_in(client, owner, code=owner.code()) == 302


def test_it_does_not_count_forms_sent_without_a_code(client: Client, owner: Owner) -> None:
    for _ in range(6):
        sign_in(client, owner)

    assert sign_in(client, owner, code=owner.code()) == 302


def test_it_ignores_an_offsite_next_url(client: Client, owner: Owner) -> None:
    response = client.post(
        f"{LOGIN}?next=https://evil.example/",
        {"username": owner.username, "password": owner.password, "code": owner.code()},
    )

    assert response["Location"] == "/"


def test_it_returns_to_the_page_asked_for(client: Client, owner: Owner) -> None:
    response = client.post(
        LOGIN,
        {
            "username": owner.username,
            "password": owner.password,
            "code": owner.code(),
            "next": "/settings/",
        },
    )

    assert response["Location"] == "/settings/"


def test_it_sends_an_expired_session_to_sign_in_with_a_notice(owner: Owner) -> None:
    client = verified_client(owner)
    client.session.flush()  # what expiry does: the cookie stays, the session row is gone
    client.cookies["sessionid"] = "expired-session-key"

    response = client.get("/settings/")

    assert response.status_code == 302
    assert response["Location"] == "/login/?next=%2Fsettings%2F&expired=1"
    assert b"Your session has ended" in client.get(response["Location"]).content
    assert last_event().kind == AuditEvent.Kind.SESSION_EXPIRED


def test_it_refuses_a_session_that_skipped_the_second_factor(client: Client, owner: Owner) -> None:
    client.force_login(owner.user)  # password-level session, no verified device

    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert last_event().kind == AuditEvent.Kind.SESSION_UNVERIFIED
    assert SESSION_KEY not in client.session


def test_it_signs_out_on_post_only(owner_client: Client) -> None:
    assert owner_client.get("/logout/").status_code == 405

    response = owner_client.post("/logout/")

    assert response.status_code == 302
    assert owner_client.get("/").status_code == 302


@pytest.mark.parametrize("path", ["/admin/", "/admin/agentos/auditevent/"])
def test_it_refuses_the_admin_to_a_session_without_a_verified_device(
    client: Client, owner: Owner, path: str
) -> None:
    client.force_login(owner.user)

    response = client.get(path, follow=True)

    final_url, _status = response.redirect_chain[-1]
    assert final_url.startswith(reverse("console:login"))
    assert b"Sign in" in response.content


def test_it_opens_the_admin_to_a_verified_owner(owner_client: Client) -> None:
    assert owner_client.get("/admin/").status_code == 200
    assert owner_client.get("/admin/agentos/auditevent/").status_code == 200
