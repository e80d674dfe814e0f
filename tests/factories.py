"""Plain factories that go through the real services."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.test import Client
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from agentos.core import owner as owner_service
from agentos.core.owner import OwnerCredentials


@dataclass
class Owner:
    user: User
    credentials: OwnerCredentials

    @property
    def username(self) -> str:
        return self.credentials.username

    @property
    def password(self) -> str:
        return self.credentials.password

    @property
    def device(self) -> TOTPDevice:
        return TOTPDevice.objects.get(user=self.user)

    def code(self) -> str:
        """The TOTP code an authenticator app would show right now."""
        device = self.device
        value = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
        return f"{value:0{device.digits}d}"


def make_owner() -> Owner:
    credentials = owner_service.ensure_owner()
    assert credentials is not None, "an owner already exists"
    return Owner(user=User.objects.get(username=credentials.username), credentials=credentials)


def verified_client(owner: Owner, client: Client | None = None) -> Client:
    """A client whose session passed both factors, without spending a TOTP code."""
    client = client or Client()
    client.force_login(owner.user)
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = owner.device.persistent_id
    session.save()
    return client
