"""Provider API keys: from the environment, else set (write-only) from the console.

Stored encrypted (Fernet, with a key derived from Django's secret key): a copy of the database
alone does not give them away. They are read only when a provider client is built, never put in
a prompt, a sandbox, a log or an event.
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from kernel.exceptions import KernelError
from missions.models import ProviderKey
from missions.providers.registry import KEYS

ENV = KEYS  # provider -> the environment variable its SDK reads


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"agentos provider keys:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def _known(provider: str) -> str:
    if provider not in ENV:
        raise KernelError(
            f"Unknown provider {provider!r}; expected {', '.join(sorted(ENV))}.",
            code="not_found",
            status=404,
        )
    return provider


def get(provider: str) -> str | None:
    """The key to use: the environment's, else the stored one, else None."""
    from_env = os.environ.get(ENV.get(provider, ""), "")
    if from_env:
        return from_env
    stored = ProviderKey.objects.filter(provider=provider).first()
    if stored is None:
        return None
    try:
        return _fernet().decrypt(bytes(stored.ciphertext)).decode()
    except InvalidToken:
        return None  # the secret key changed: the stored key is unreadable, set it again


def put(provider: str, key: str) -> ProviderKey:
    key = key.strip()
    if len(key) < 8 or len(key) > 500 or any(c.isspace() for c in key):
        raise KernelError("An API key is 8 to 500 characters without spaces.", code="invalid_input")
    stored, _ = ProviderKey.objects.update_or_create(
        provider=_known(provider),
        defaults={"ciphertext": _fernet().encrypt(key.encode()), "hint": key[-4:]},
    )
    return stored


def delete(provider: str) -> bool:
    deleted, _ = ProviderKey.objects.filter(provider=_known(provider)).delete()
    return deleted > 0


def status() -> list[dict[str, object]]:
    """What the console shows: configured or not, and where from — never the key."""
    stored = {key.provider: key for key in ProviderKey.objects.all()}
    return [
        {
            "provider": provider,
            "configured": bool(os.environ.get(variable)) or provider in stored,
            "source": "environment"
            if os.environ.get(variable)
            else ("console" if provider in stored else None),
            "hint": stored[provider].hint if provider in stored else None,
            "updated_at": stored[provider].updated_at if provider in stored else None,
        }
        for provider, variable in sorted(ENV.items())
    ]
