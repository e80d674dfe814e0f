"""Provider API keys: from the environment, else set (write-only) from the console.

Stored encrypted by the vault (`agentos.core.vault`, keys apart from Django's secret key): a copy of
the database alone does not give them away, and changing the secret key loses none. A stored key
no vault key opens is reported in the log and kept, never dropped. They are read only when a
provider client is built, never put in a prompt, a sandbox, a log or an event.
"""

from __future__ import annotations

import logging
import os

from django.utils.translation import gettext as _

from agentos.core import vault
from missions.errors import MissionError
from missions.models import ProviderKey
from missions.providers.registry import KEYS

logger = logging.getLogger(__name__)

ENV = KEYS  # provider -> the environment variable that wins over a stored key


def _known(provider: str) -> str:
    if provider not in ENV:
        raise MissionError(
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
        return vault.decrypt(bytes(stored.ciphertext))
    except vault.Unreadable:
        # Kept, not deleted: the owner may still restore the vault key that opens it.
        logger.error(
            "no vault key opens the stored %s key (the vault's keys were lost or replaced); "
            "restore them, or set the key again in Settings",
            provider,
        )
        return None


def put(provider: str, key: str) -> ProviderKey:
    key = key.strip()
    if len(key) < 8 or len(key) > 500 or any(c.isspace() for c in key):
        raise MissionError(
            _("An API key is 8 to 500 characters without spaces."), code="invalid_input"
        )
    stored, _created = ProviderKey.objects.update_or_create(
        provider=_known(provider),
        defaults={"ciphertext": vault.encrypt(key), "hint": key[-4:]},
    )
    return stored


def delete(provider: str) -> bool:
    deleted, _by_model = ProviderKey.objects.filter(provider=_known(provider)).delete()
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


def values() -> list[str]:
    """Every provider key in use, for the scrubber (never shown anywhere)."""
    return [key for provider in ENV if (key := get(provider))]
