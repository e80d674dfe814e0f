"""The single owner account: created on first start with password, TOTP device, backup codes."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from agentos.core import audit
from agentos.core.models import ApiToken, AuditEvent

DEFAULT_USERNAME = "owner"
BACKUP_CODES = 10


@dataclass(frozen=True)
class OwnerCredentials:
    """Shown once on the terminal; nothing here is stored in clear."""

    username: str
    password: str
    totp_uri: str
    backup_codes: list[str]
    tokens_revoked: int = 0


def get_owner() -> User | None:
    return User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()


def is_verified_owner(user: object) -> bool:
    """The owner (the active superuser: agentos has one) in a session that passed the second
    factor (django-otp's `is_verified`). Another account, even verified, is not the owner."""
    is_verified = getattr(user, "is_verified", None)
    return bool(
        getattr(user, "is_authenticated", False)
        and getattr(user, "is_active", False)
        and getattr(user, "is_superuser", False)
        and callable(is_verified)
        and is_verified()
    )


def ensure_owner(*, username: str = DEFAULT_USERNAME) -> OwnerCredentials | None:
    """Create the owner if there is none; return the new credentials, or None if one exists."""
    with transaction.atomic():
        # Serialise concurrent first starts on the user table's lock.
        list(User.objects.select_for_update().filter(is_superuser=True))
        if get_owner() is not None:
            return None
        user = User.objects.create_superuser(username=username, email="")
        credentials = _issue_credentials(user)
        audit.record(AuditEvent.Kind.OWNER_CREATED, username=username)
    return credentials


def reset_owner() -> OwnerCredentials:
    """New password, new TOTP secret and new backup codes; every old one stops working, and so
    does every API token (whoever lost the credentials may have lost a token too)."""
    with transaction.atomic():
        user = get_owner()
        if user is None:
            raise LookupError("There is no owner account yet; start agentos once to create it.")
        credentials = _issue_credentials(user)
        # Every account's tokens, not only the owner's: none may outlive a reset.
        revoked = ApiToken.objects.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        audit.record(
            AuditEvent.Kind.OWNER_RESET, username=user.get_username(), tokens_revoked=revoked
        )
    return replace(credentials, tokens_revoked=revoked)


def _issue_credentials(user: User) -> OwnerCredentials:
    password = secrets.token_urlsafe(18)
    user.set_password(password)
    user.save(update_fields=["password"])
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
    totp = TOTPDevice.objects.create(user=user, name="authenticator app", confirmed=True)
    static = StaticDevice.objects.create(user=user, name="backup codes", confirmed=True)
    codes = [StaticToken.random_token() for _ in range(BACKUP_CODES)]
    StaticToken.objects.bulk_create(StaticToken(device=static, token=code) for code in codes)
    return OwnerCredentials(
        username=user.get_username(),
        password=password,
        totp_uri=totp.config_url,
        backup_codes=codes,
    )
