"""Passkeys as a second factor: added in Settings after a current code, used at sign-in after the
password, removed after a code. Every answer is checked for real (py_webauthn) against a software
authenticator with its own keys; a wrong origin, a spent challenge or another account's passkey is
refused."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp_webauthn.models import WebAuthnCredential

from agentos.core.models import AuditEvent
from tests.factories import Owner, verified_client
from tests.passkey_authenticator import SoftAuthenticator

ORIGIN = "http://testserver"  # Django's test client's host, in ALLOWED_HOSTS under tests


def enrolment_options(client: Client, *, code: str, name: str = "laptop") -> Any:
    return client.post("/settings/passkeys/options", {"name": name, "code": code})


def enrol(client: Client, owner: Owner, authenticator: SoftAuthenticator) -> WebAuthnCredential:
    options = enrolment_options(client, code=owner.credentials.backup_codes[0]).json()
    answer = authenticator.create(options, origin=ORIGIN)
    response = client.post("/settings/passkeys/add", {"answer": answer}, follow=True)
    assert "is added" in response.content.decode()
    return WebAuthnCredential.objects.get(user=owner.user)


def sign_in(client: Client, owner: Owner, answer: str, *, password: str | None = None) -> Any:
    return client.post(
        "/login/",
        {
            "username": owner.username,
            "password": password or owner.password,
            "code": "",
            "passkey": answer,
        },
    )


def challenge(client: Client) -> dict[str, Any]:
    response = client.post("/login/passkey")
    assert response.status_code == 200
    return dict(response.json())


@pytest.fixture
def authenticator() -> SoftAuthenticator:
    return SoftAuthenticator()


def test_it_adds_a_passkey_after_a_code_and_signs_in_with_it_after_the_password(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    options = enrolment_options(owner_client, code=owner.credentials.backup_codes[0]).json()
    assert options["rp"] == {"id": "testserver", "name": "agentos"}
    # Discoverable: the sign-in page asks for "a passkey of this site" before naming an account.
    assert options["authenticatorSelection"]["residentKey"] == "required"
    owner_client.post(
        "/settings/passkeys/add", {"answer": authenticator.create(options, origin=ORIGIN)}
    )
    device = WebAuthnCredential.objects.get(user=owner.user)
    assert (device.name, device.confirmed) == ("laptop", True)
    added = AuditEvent.objects.get(kind=AuditEvent.Kind.DEVICE_ADDED)
    assert added.detail["device"] == "laptop"
    assert added.detail["type"] == "passkey"
    assert "laptop" in owner_client.get("/settings/").content.decode()

    client = Client()
    options = challenge(client)
    assert options["allowCredentials"] == []  # which passkeys exist is said to nobody
    response = sign_in(client, owner, authenticator.get(options, origin=ORIGIN))

    assert response.status_code == 302, response.content.decode()
    assert client.get("/settings/").status_code == 200  # a verified owner's session
    assert client.session[DEVICE_ID_SESSION_KEY] == device.persistent_id
    event = AuditEvent.objects.filter(kind=AuditEvent.Kind.SIGNIN_SUCCEEDED).get()
    assert event.detail["device"] == device.persistent_id
    device.refresh_from_db()
    assert device.last_used_at is not None


def test_it_refuses_to_start_adding_a_passkey_without_a_verified_session(
    owner: Owner, client: Client
) -> None:
    response = client.post("/settings/passkeys/options", {"code": owner.code()})
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")

    # The password alone opens no door: such a session is audited and ended.
    client.force_login(owner.user)
    response = client.post("/settings/passkeys/options", {"code": owner.code()})
    assert response.status_code == 302
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.SESSION_UNVERIFIED).exists()
    assert "_auth_user_id" not in client.session


def test_it_refuses_to_start_adding_a_passkey_with_a_wrong_code(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    response = enrolment_options(owner_client, code="000000")

    assert response.status_code == 400
    assert "That code was not accepted" in response.json()["error"]
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.SECOND_FACTOR_REFUSED).exists()
    # Nothing was started: an answer made for options fetched elsewhere is not taken.
    elsewhere = verified_client(owner)
    options = enrolment_options(elsewhere, code=owner.credentials.backup_codes[0]).json()
    answer = authenticator.create(options, origin=ORIGIN)
    page = owner_client.post("/settings/passkeys/add", {"answer": answer}, follow=True)
    assert "No passkey is being added here" in page.content.decode()
    assert not WebAuthnCredential.objects.exists()


def test_it_refuses_an_answer_made_for_another_site(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    options = enrolment_options(owner_client, code=owner.credentials.backup_codes[0]).json()
    answer = authenticator.create(options, origin="https://agentos.example.net")

    page = owner_client.post("/settings/passkeys/add", {"answer": answer}, follow=True)

    assert "the passkey was not added" in page.content.decode()
    assert not WebAuthnCredential.objects.exists()
    # The challenge was spent by the refused answer: a corrected one cannot reuse it.
    again = owner_client.post(
        "/settings/passkeys/add",
        {"answer": authenticator.create(options, origin=ORIGIN)},
        follow=True,
    )
    assert "No passkey is being added here" in again.content.decode()


def test_a_passkey_does_not_open_a_session_without_the_right_password(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    enrol(owner_client, owner, authenticator)
    client = Client()

    response = sign_in(
        client, owner, authenticator.get(challenge(client), origin=ORIGIN), password="x" * 14
    )

    assert response.status_code == 401
    assert "_auth_user_id" not in client.session
    failure = AuditEvent.objects.get(kind=AuditEvent.Kind.SIGNIN_FAILED)
    assert failure.detail["reason"] == "bad_password"


def test_it_takes_each_sign_in_answer_once(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    enrol(owner_client, owner, authenticator)
    client = Client()
    answer = authenticator.get(challenge(client), origin=ORIGIN)
    assert sign_in(client, owner, answer).status_code == 302
    client.post("/logout/")

    replayed = sign_in(client, owner, answer)

    assert replayed.status_code == 401
    assert "_auth_user_id" not in client.session
    failure = AuditEvent.objects.get(kind=AuditEvent.Kind.SIGNIN_FAILED)
    assert failure.detail["reason"] == "bad_passkey"


def test_it_refuses_an_answer_given_after_the_time_allowed(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    enrol(owner_client, owner, authenticator)
    client = Client()
    with time_machine.travel(timezone.now(), tick=False) as clock:
        options = challenge(client)
        assert options["timeout"] == 300_000  # what the browser is told, in milliseconds
        clock.shift(timedelta(seconds=301))

        late = sign_in(client, owner, authenticator.get(options, origin=ORIGIN))

    assert late.status_code == 401
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize(
    ("origin", "rp_id"),
    [("https://phish.example.net", None), (ORIGIN, "phish.example.net")],
    ids=["other-origin", "other-relying-party"],
)
def test_it_refuses_a_sign_in_answer_for_another_site(
    owner: Owner,
    owner_client: Client,
    authenticator: SoftAuthenticator,
    origin: str,
    rp_id: str | None,
) -> None:
    enrol(owner_client, owner, authenticator)
    client = Client()

    response = sign_in(
        client, owner, authenticator.get(challenge(client), origin=origin, rp_id=rp_id)
    )

    assert response.status_code == 401
    assert "Sign-in failed" in response.content.decode()


def test_a_refused_answer_is_not_sent_back_to_outvote_a_code(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    enrol(owner_client, owner, authenticator)
    client = Client()
    answer = authenticator.get(challenge(client), origin="https://phish.example.net")

    page = sign_in(client, owner, answer).content.decode()

    assert '<input type="hidden" name="passkey" value="">' in page
    assert answer not in page


def test_it_refuses_another_accounts_passkey(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    enrol(owner_client, owner, authenticator)
    other = User.objects.create_user("visitor", password="another long password 1")
    WebAuthnCredential.objects.update(user=other)  # the owner's key, now someone else's
    client = Client()

    response = sign_in(client, owner, authenticator.get(challenge(client), origin=ORIGIN))

    assert response.status_code == 401


def test_it_refuses_an_answer_that_is_not_one(owner: Owner, client: Client) -> None:
    challenge(client)

    for answer in ["{", json.dumps([1]), json.dumps({"id": "x"}), "x" * 20_000]:
        response = sign_in(client, owner, answer)
        assert response.status_code in {400, 401}, answer[:20]
        assert "_auth_user_id" not in client.session


def test_it_removes_a_passkey_after_a_code_and_the_session_it_opened_stays(
    owner: Owner, owner_client: Client, authenticator: SoftAuthenticator
) -> None:
    device = enrol(owner_client, owner, authenticator)
    client = Client()
    assert (
        sign_in(client, owner, authenticator.get(challenge(client), origin=ORIGIN)).status_code
        == 302
    )

    refused = client.post(f"/settings/passkeys/{device.pk}/remove", {"code": "000000"}, follow=True)
    assert "That code was not accepted" in refused.content.decode()
    assert WebAuthnCredential.objects.filter(pk=device.pk).exists()

    removed = client.post(
        f"/settings/passkeys/{device.pk}/remove",
        {"code": owner.credentials.backup_codes[1]},
        follow=True,
    )

    assert "The passkey is removed." in removed.content.decode()
    assert not WebAuthnCredential.objects.exists()
    assert AuditEvent.objects.get(kind=AuditEvent.Kind.DEVICE_REMOVED).detail == {
        "device": "laptop",
        "type": "passkey",
        "path": f"/settings/passkeys/{device.pk}/remove",
    }
    assert client.get("/settings/").status_code == 200
    # A removed passkey opens nothing any more.
    other = Client()
    assert (
        sign_in(other, owner, authenticator.get(challenge(other), origin=ORIGIN)).status_code == 401
    )


@pytest.mark.parametrize(
    "path", ["/settings/passkeys/add", "/settings/passkeys/1/remove", "/settings/passkeys/options"]
)
def test_it_lets_only_the_owner_change_passkeys(db: None, path: str) -> None:
    response = Client().post(path, {"code": "123456", "answer": "{}"})

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
