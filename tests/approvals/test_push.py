"""Web Push: a wait for the owner reaches every subscribed browser, encrypted to it (RFC 8291),
signed with the server's VAPID key (RFC 8292), through a push service that runs here: a small
HTTP server. The payload is decrypted with the browser's private key, as a phone would."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.test import Client
from pytest_django.fixtures import Settings

from agentos.core.models import AuditEvent, PushState, PushSubscription
from approvals import notifications, push
from kernel import notices
from tests.approvals.factories import make_approval, make_question
from tests.factories import Owner

pytestmark = pytest.mark.django_db(transaction=True)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class PushService:
    """Answers each POST with the status set for its path (201 unless told)."""

    url: str
    received: list[Received] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)


@pytest.fixture
def service(settings: Settings) -> Iterator[PushService]:
    settings.PUSH_ALLOW_LOOPBACK = True
    found = PushService(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            found.received.append(
                Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            self.send_response(found.statuses.get(self.path, 201))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found
    server.shutdown()
    server.server_close()


@dataclass
class Browser:
    """What a browser keeps of its subscription: the private key and the auth secret."""

    endpoint: str
    key: ec.EllipticCurvePrivateKey
    auth: bytes

    def subscription(self) -> dict[str, Any]:
        public = self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {
            "endpoint": self.endpoint,
            "expirationTime": None,
            "keys": {"p256dh": b64(public), "auth": b64(self.auth)},
        }

    def read(self, received: Received) -> dict[str, Any]:
        plain = http_ece.decrypt(
            received.body, private_key=self.key, auth_secret=self.auth, version="aes128gcm"
        )
        payload = json.loads(plain)
        assert isinstance(payload, dict)
        return payload


def subscribe(client: Client, service: PushService, name: str) -> Browser:
    browser = Browser(
        f"{service.url}/push/{name}", ec.generate_private_key(ec.SECP256R1()), os.urandom(16)
    )
    response = client.post(
        "/settings/push/subscribe",
        json.dumps(browser.subscription()),
        content_type="application/json",
        HTTP_USER_AGENT=f"{name} browser",
    )
    assert response.status_code == 201, response.content
    return browser


def test_it_pushes_a_new_approval_to_every_subscribed_browser_encrypted_and_signed(
    owner_client: Client, service: PushService
) -> None:
    page = owner_client.get("/settings/").content.decode()
    phone = subscribe(owner_client, service, "phone")
    tablet = subscribe(owner_client, service, "tablet")
    approval = make_approval()

    assert notifications.deliver_one() is False

    assert sorted(r.path for r in service.received) == ["/push/phone", "/push/tablet"]
    for browser in (phone, tablet):
        (received,) = [r for r in service.received if r.path.endswith(browser.endpoint[-6:])]
        payload = browser.read(received)
        assert payload["title"] == "Approval needed"
        assert "Run a command" in payload["body"]
        assert "Publish the 1.3 release notes" in payload["body"]
        assert payload["url"] == f"/approvals/{approval.pk}/"
        assert received.headers["content-encoding"] == "aes128gcm"
        assert b"Approval" not in received.body  # the push service reads nothing
        # Signed with the key browsers subscribed with, the one the page shows.
        key = received.headers["authorization"].split("k=")[1]
        assert key == PushState.objects.get().vapid_public
        assert f'data-public-key="{key}"' in page
        assert int(received.headers["ttl"]) > 0
    kinds = list(AuditEvent.objects.values_list("kind", flat=True))
    assert kinds.count(AuditEvent.Kind.PUSH_SUBSCRIBED) == 2


def test_it_notifies_each_wait_once(owner_client: Client, service: PushService) -> None:
    owner_client.get("/settings/")
    subscribe(owner_client, service, "phone")
    make_approval()
    notifications.deliver_one()

    notifications.deliver_one()

    assert len(service.received) == 1


def test_it_names_a_question_and_opens_its_page(owner_client: Client, service: PushService) -> None:
    owner_client.get("/settings/")
    phone = subscribe(owner_client, service, "phone")
    question = make_question(text="Which branch should the notes go to?")

    notifications.deliver_one()

    payload = phone.read(service.received[0])
    assert payload["title"] == "A question for you"
    assert payload["body"] == "Which branch should the notes go to?"
    assert payload["url"] == f"/questions/{question.pk}/"


def test_it_drops_a_subscription_the_push_service_says_is_gone_and_keeps_a_failing_one(
    owner_client: Client, service: PushService
) -> None:
    owner_client.get("/settings/")
    subscribe(owner_client, service, "gone")
    subscribe(owner_client, service, "flaky")
    service.statuses = {"/push/gone": 410, "/push/flaky": 503}
    make_approval()

    notifications.deliver_one()

    assert [s.endpoint for s in PushSubscription.objects.all()] == [f"{service.url}/push/flaky"]


def test_it_never_blocks_on_a_push_service_that_is_down(
    owner_client: Client, service: PushService, caplog: pytest.LogCaptureFixture
) -> None:
    owner_client.get("/settings/")
    browser = subscribe(owner_client, service, "phone")
    PushSubscription.objects.update(endpoint="http://127.0.0.1:9/push/phone")  # nobody there
    make_approval()

    assert notifications.deliver_one() is False

    assert PushSubscription.objects.count() == 1
    assert "/push/phone" not in caplog.text  # an endpoint is a capability: its host only
    assert browser.auth.hex() not in caplog.text


def test_the_test_button_sends_to_every_device(owner_client: Client, service: PushService) -> None:
    phone = subscribe(owner_client, service, "phone")

    response = owner_client.post("/settings/push/test", follow=True)

    assert "Test notification sent to 1 device." in response.content.decode()
    assert phone.read(service.received[0])["title"] == "Notifications work"


def test_it_unsubscribes_a_browser(owner_client: Client, service: PushService) -> None:
    phone = subscribe(owner_client, service, "phone")

    owner_client.post(
        "/settings/push/unsubscribe",
        json.dumps({"endpoint": phone.endpoint}),
        content_type="application/json",
    )

    assert not PushSubscription.objects.exists()
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.PUSH_UNSUBSCRIBED).exists()


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://push.example.com/x",  # not https
        "https://127.0.0.1/x",  # the server's own network
        "https://10.0.0.7/x",
        "https://localhost/x",
    ],
)
def test_it_refuses_an_endpoint_that_is_not_a_push_service(
    owner_client: Client, endpoint: str
) -> None:
    browser = Browser(endpoint, ec.generate_private_key(ec.SECP256R1()), os.urandom(16))

    response = owner_client.post(
        "/settings/push/subscribe",
        json.dumps(browser.subscription()),
        content_type="application/json",
    )

    assert response.status_code == 400
    assert not PushSubscription.objects.exists()


def test_it_keeps_the_private_key_encrypted_and_off_every_page(
    owner: Owner, owner_client: Client
) -> None:
    page = owner_client.get("/settings/").content.decode()

    stored = bytes(PushState.objects.get().vapid_private)
    assert b"PRIVATE KEY" not in stored
    pem = push._vapid(PushState.objects.get()).private_pem().decode()
    body = "".join(pem.splitlines()[1:-1])
    assert body not in page
    assert body[:16] not in page


def test_it_pushes_a_cap_80_percent_used_once(owner_client: Client, service: PushService) -> None:
    owner_client.get("/settings/")
    phone = subscribe(owner_client, service, "phone")
    mission = make_approval().run.account
    notifications.deliver_one()
    service.received.clear()

    notices.notify_once(
        f"account:{mission.pk}:max_usd_micros",
        message=f"Mission {mission.pk} has used 80 % of its spend cap.",
        account_id=mission.pk,
    )
    notifications.deliver_one()
    notifications.deliver_one()

    (received,) = service.received
    payload = phone.read(received)
    assert payload["title"] == "A cap is 80 % used"
    assert payload["body"] == f"Mission {mission.pk} has used 80 % of its spend cap."
    assert payload["url"] == f"/missions/{mission.pk}/"
