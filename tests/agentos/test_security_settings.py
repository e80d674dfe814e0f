"""Settings' security: the owner's sessions, authenticator apps and backup codes. Every change
asks the second factor again and is audited; the last authenticator is never removed."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from agentos.core.models import AuditEvent
from tests.factories import Owner

PHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X) Mobile/15E148"
LAPTOP = "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0"


def signed_in(owner: Owner, agent: str, code: str) -> Client:
    client = Client(HTTP_USER_AGENT=agent)
    response = client.post(
        "/login/", {"username": owner.username, "password": owner.password, "code": code}
    )
    assert response.status_code == 302, response.content.decode()
    return client


def code_of(device: TOTPDevice) -> str:
    value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{value:0{device.digits}d}"


def section(page: str, anchor: str) -> str:
    match = re.search(rf'<section class="card" id="{anchor}".*?</section>', page, re.S)
    assert match, f"no {anchor} card"
    return match.group(0)


def kinds() -> list[str]:
    return list(AuditEvent.objects.order_by("id").values_list("kind", flat=True))


def test_it_lists_the_owners_sessions_and_marks_this_one(owner: Owner) -> None:
    phone = signed_in(owner, PHONE, owner.code())
    signed_in(owner, LAPTOP, owner.credentials.backup_codes[0])

    sessions = section(phone.get("/settings/").content.decode(), "sessions")

    assert sessions.count('<li class="session') == 2
    assert sessions.count("this session") == 1
    assert re.search(r"session-current.*?iPhone", sessions, re.S)
    assert "Firefox" in sessions
    assert "127.0.0.1" in sessions
    assert "Last seen" in sessions
    key = phone.session.session_key
    assert key
    assert key not in sessions  # a key in a page is a session to steal


def test_it_signs_out_every_other_session_and_keeps_this_one(owner: Owner) -> None:
    phone = signed_in(owner, PHONE, owner.code())
    laptop = signed_in(owner, LAPTOP, owner.credentials.backup_codes[0])

    response = phone.post("/settings/sessions/sign-out-others")

    assert response.status_code == 302
    assert "1 other session signed out." in phone.get(response["Location"]).content.decode()
    assert laptop.get("/settings/")["Location"].startswith("/login/")
    assert phone.get("/settings/").status_code == 200
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.SESSIONS_ENDED)
    assert event.detail["ended"] == 1
    assert event.username == owner.username


def test_it_refuses_a_change_with_a_wrong_code_and_audits_it(
    owner: Owner, owner_client: Client
) -> None:
    response = owner_client.post(
        "/settings/authenticators/add", {"name": "new phone", "code": "000000"}, follow=True
    )

    assert "That code was not accepted." in response.content.decode()
    assert TOTPDevice.objects.filter(user=owner.user).count() == 1
    assert AuditEvent.Kind.SECOND_FACTOR_REFUSED in kinds()


def test_it_adds_an_authenticator_that_counts_only_once_a_code_from_it_confirms_it(
    owner: Owner, owner_client: Client
) -> None:
    response = owner_client.post(
        "/settings/authenticators/add", {"name": "new phone", "code": owner.code()}, follow=True
    )

    new = TOTPDevice.objects.get(user=owner.user, name="new phone")
    assert not new.confirmed
    card = section(response.content.decode(), "authenticators")
    assert 'src="data:image/svg+xml' in card
    assert "otpauth://totp/" in card
    wrong = owner_client.post(
        f"/settings/authenticators/{new.pk}/confirm", {"code": "123456"}, follow=True
    )
    assert "does not match the new authenticator" in wrong.content.decode()
    assert not TOTPDevice.objects.get(pk=new.pk).confirmed

    owner_client.post(f"/settings/authenticators/{new.pk}/confirm", {"code": code_of(new)})

    assert TOTPDevice.objects.get(pk=new.pk).confirmed
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.DEVICE_ADDED)
    assert event.detail["device"] == "new phone"
    page = section(owner_client.get("/settings/").content.decode(), "authenticators")
    assert "data:image/svg+xml" not in page  # the secret is shown only until confirmed


def test_it_never_removes_the_only_authenticator(owner: Owner, owner_client: Client) -> None:
    response = owner_client.post(
        f"/settings/authenticators/{owner.device.pk}/remove",
        {"code": owner.credentials.backup_codes[0]},
        follow=True,
    )

    assert "This is your only authenticator" in response.content.decode()
    assert TOTPDevice.objects.filter(user=owner.user, confirmed=True).count() == 1
    # The code was not spent on a refused change.
    assert StaticToken.objects.filter(token=owner.credentials.backup_codes[0]).exists()


def test_it_removes_an_authenticator_when_another_remains_and_this_session_stays_open(
    owner: Owner,
) -> None:
    old = owner.device
    phone = signed_in(owner, PHONE, code_of(old))  # this session was opened with `old`
    new = TOTPDevice.objects.create(user=owner.user, name="new phone", confirmed=True)

    phone.post(f"/settings/authenticators/{old.pk}/remove", {"code": code_of(new)})

    assert list(TOTPDevice.objects.filter(user=owner.user)) == [new]
    assert AuditEvent.objects.get(kind=AuditEvent.Kind.DEVICE_REMOVED).detail["device"] == (
        old.name
    )
    assert phone.get("/settings/").status_code == 200


def test_it_makes_new_backup_codes_shown_once_and_the_old_ones_stop_working(
    owner: Owner, owner_client: Client
) -> None:
    old = owner.credentials.backup_codes

    response = owner_client.post("/settings/backup-codes", {"code": old[0]})

    assert response.status_code == 200
    card = section(response.content.decode(), "backup-codes")
    shown = re.findall(r"<li><code>(\w+)</code></li>", card)
    assert len(shown) == 10
    assert not set(shown) & set(old)
    assert "10 unused backup codes left." in card
    assert not StaticToken.objects.filter(token__in=old).exists()
    assert response["Cache-Control"].startswith("max-age=0")
    again = owner_client.get("/settings/").content.decode()
    assert not any(code in again for code in shown)
    assert AuditEvent.objects.get(kind=AuditEvent.Kind.BACKUP_CODES_RENEWED).detail["codes"] == 10
    assert not any(code in str(e.detail) for e in AuditEvent.objects.all() for code in shown)


@pytest.mark.parametrize(
    "path",
    ["/settings/sessions/sign-out-others", "/settings/backup-codes", "/settings/push/test"],
)
def test_it_lets_only_the_owner_change_security(db: None, path: str) -> None:
    response = Client().post(path, {"code": "123456"})

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
