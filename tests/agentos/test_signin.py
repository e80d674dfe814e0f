from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth import SESSION_KEY
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from agentos.core.models import AuditEvent, SignInThrottle
from tests.factories import Owner, verified_client

LOGIN = "/login/"


FAILED = "Sign-in failed: check your username, password and code."
OWNER_ADDRESS = "127.0.0.1"
ATTACKER = "203.0.113.66"


def attempt(
    client: Client,
    *,
    username: str,
    password: str,
    code: str,
    address: str = OWNER_ADDRESS,
) -> Any:
    return client.post(
        LOGIN,
        {"username": username, "password": password, "code": code},
        REMOTE_ADDR=address,
    )


def sign_in(client: Client, owner: Owner, *, password: str | None = None, code: str = "") -> int:
    response = client.post(
        LOGIN,
        {"username": owner.username, "password": password or owner.password, "code": code},
    )
    return response.status_code


def error_text(response: Any) -> str:
    found = re.search(r'id="signin-error">([^<]*)<', response.content.decode())
    assert found, "no sign-in error on the page"
    return html.unescape(found.group(1))


def wrong_code(owner: Owner) -> str:
    return f"{(int(owner.code()) + 1) % 1_000_000:06d}"


def fail(client: Client, owner: Owner, times: int, *, address: str = OWNER_ADDRESS) -> None:
    for _ in range(times):
        response = attempt(
            client, username=owner.username, password="wrong", code="000000", address=address
        )
        assert response.status_code == 401


@pytest.fixture
def frozen() -> Iterator[None]:
    """Time stands still: a 1 s delay cannot run out while a slow machine runs the test."""
    with time_machine.travel(timezone.now(), tick=False):
        yield


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
    assert error_text(response) == FAILED
    assert SESSION_KEY not in client.session
    assert last_event().detail["reason"] == "bad_password"


def test_it_refuses_a_wrong_code(client: Client, owner: Owner) -> None:
    assert sign_in(client, owner, code=wrong_code(owner)) == 401
    assert SESSION_KEY not in client.session
    assert last_event().detail["reason"] == "bad_code"


def test_it_says_the_same_whatever_was_wrong(client: Client, owner: Owner) -> None:
    """A right password with a wrong code must look exactly like a wrong password."""
    attempts = {
        "unknown user": ("nobody", owner.password, owner.code()),
        "wrong password": (owner.username, "not-the-password", owner.code()),
        "wrong code": (owner.username, owner.password, wrong_code(owner)),
    }

    # From three addresses: each attempt is the first failure from where it comes.
    answers = {
        what: attempt(client, username=user, password=password, code=code, address=address)
        for (what, (user, password, code)), address in zip(
            attempts.items(), ["192.0.2.1", "192.0.2.2", "192.0.2.3"], strict=True
        )
    }

    assert {(r.status_code, error_text(r)) for r in answers.values()} == {(401, FAILED)}


@override_settings(OTP_TOTP_THROTTLE_FACTOR=1, OTP_STATIC_THROTTLE_FACTOR=1)  # as in production
def test_a_right_code_too_soon_after_a_wrong_one_says_how_long_to_wait(
    client: Client, owner: Owner
) -> None:
    with time_machine.travel(timezone.now(), tick=False) as clock:
        wrong = attempt(
            client, username=owner.username, password=owner.password, code=wrong_code(owner)
        )
        too_soon = attempt(
            client, username=owner.username, password=owner.password, code=owner.code()
        )
        assert wrong.status_code == too_soon.status_code == 401
        assert "Wait 1 second before you try again" in error_text(wrong)
        assert "Wait 2 seconds before you try again" in error_text(too_soon)
        assert "a code sent sooner is refused, even a right one" in error_text(too_soon)

        clock.shift(2)
        assert sign_in(client, owner, code=owner.code()) == 302


@override_settings(OTP_TOTP_THROTTLE_FACTOR=1, OTP_STATIC_THROTTLE_FACTOR=1)
def test_the_wait_it_names_says_nothing_of_the_password(client: Client, owner: Owner) -> None:
    """A wrong password names the same wait as a right password with a wrong code."""
    with time_machine.travel(timezone.now(), tick=False):
        answers = [
            attempt(client, username=owner.username, password=password, code=code, address=where)
            for password, code, where in [
                ("not-the-password", owner.code(), "192.0.2.1"),
                (owner.password, wrong_code(owner), "192.0.2.2"),
            ]
        ]

    assert len({(r.status_code, error_text(r)) for r in answers}) == 1


def test_the_code_field_takes_backup_codes_too(client: Client) -> None:
    content = client.get(LOGIN).content.decode()

    field = re.search(r'<input[^>]*name="code"[^>]*>', content)
    assert field is not None
    assert 'inputmode="text"' in field.group(0)
    assert 'autocomplete="one-time-code"' in field.group(0)
    assert 'autocapitalize="none"' in field.group(0)


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


def test_it_delays_attempts_more_after_each_failure_past_the_free_ones(
    client: Client, owner: Owner
) -> None:
    with time_machine.travel(timezone.now(), tick=False) as clock:
        fail(client, owner, 4)  # free
        assert sign_in(client, owner, password="wrong", code="000000") == 401  # the 5th: 1 s
        waits = []
        for _ in range(12):
            response = attempt(
                client, username=owner.username, password=owner.password, code=owner.code()
            )
            assert response.status_code == 429
            seconds = int(re.findall(r"\d+", error_text(response))[0])
            waits.append(seconds)
            clock.shift(seconds)
            fail(client, owner, 1)

    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900]
    assert SESSION_KEY not in client.session


def test_a_throttled_attempt_says_nothing_of_the_password(
    client: Client, owner: Owner, frozen: None
) -> None:
    fail(client, owner, 5)

    right = attempt(client, username=owner.username, password=owner.password, code=owner.code())
    wrong = attempt(client, username=owner.username, password="wrong", code=owner.code())

    assert right.status_code == wrong.status_code == 429
    assert error_text(right) == error_text(wrong) == "Too many attempts; try again in 1 second."
    assert last_event().kind == AuditEvent.Kind.SIGNIN_THROTTLED
    assert SESSION_KEY not in client.session


def test_an_attacker_elsewhere_cannot_lock_the_owner_out(
    client: Client, owner: Owner, frozen: None
) -> None:
    fail(client, owner, 5, address=ATTACKER)
    for _ in range(30):  # refused at once now, and counted as nothing more
        response = attempt(
            client, username=owner.username, password="guess", code="000000", address=ATTACKER
        )
        assert response.status_code == 429

    assert sign_in(Client(), owner, code=owner.code()) == 302


def test_it_throttles_an_address_trying_many_usernames(
    client: Client, owner: Owner, frozen: None
) -> None:
    for number in range(20):
        response = attempt(
            client, username=f"user{number}", password="x", code="000000", address=ATTACKER
        )
        assert response.status_code == 401

    response = attempt(
        client,
        username=owner.username,
        password=owner.password,
        code=owner.code(),
        address=ATTACKER,
    )

    assert response.status_code == 429
    assert sign_in(Client(), owner, code=owner.code()) == 302  # from the owner's own address


def test_it_keeps_the_count_in_the_database_across_restarts(owner: Owner, frozen: None) -> None:
    fail(Client(), owner, 5)

    # A new client (a restarted server holds nothing in memory) is still refused.
    assert sign_in(Client(), owner, code=owner.code()) == 429
    assert SignInThrottle.objects.filter(address=OWNER_ADDRESS, username="owner").exists()


def test_it_lets_the_owner_in_again_once_the_delay_passes(client: Client, owner: Owner) -> None:
    with time_machine.travel(timezone.now(), tick=False) as clock:
        fail(client, owner, 5)  # the 5th failure: 1 s
        assert sign_in(client, owner, code=owner.code()) == 429

        clock.shift(1)

        assert sign_in(client, owner, code=owner.code()) == 302


def test_a_success_starts_the_count_again(client: Client, owner: Owner) -> None:
    fail(client, owner, 4)
    assert sign_in(client, owner, code=owner.code()) == 302
    client.post("/logout/")

    fail(client, owner, 4)

    assert sign_in(client, owner, code=owner.credentials.backup_codes[0]) == 302


def test_it_forgets_failures_after_a_quiet_day(client: Client, owner: Owner) -> None:
    fail(client, owner, 5)

    with time_machine.travel(timezone.now() + timedelta(days=1, minutes=1)):
        fail(client, owner, 4)  # free again
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
