"""The OpenAI-compatible endpoint: its base URL and the model it serves, set from the console.

Not secret (the key, optional, is kept by `missions.keys` like every provider's), but checked:
the URL is sent requests carrying the conversation, so it must be a plain http(s) address with
no credentials in it (they would be shown on the Settings page and in the log of any proxy).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.db import transaction
from django.utils.translation import gettext as _

from missions import catalog
from missions.errors import MissionError
from missions.models import ProviderEndpoint

PROVIDER = "compatible"
MAX_URL = 500
MAX_MODEL = 100


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str


def get(provider: str = PROVIDER) -> Endpoint | None:
    stored = ProviderEndpoint.objects.filter(provider=provider).first()
    return Endpoint(stored.base_url, stored.model) if stored else None


def put(*, base_url: str, model: str, context_window: int | None = None) -> ProviderEndpoint:
    """Set where the compatible server answers and which model it serves; the model enters the
    catalog (free unless the owner prices it, with the window given, else unknown)."""
    url = clean_url(base_url)
    name = clean_model(model)
    if context_window is not None and not 1024 <= context_window <= 10_000_000:
        raise MissionError(
            _("A context window is 1,024 to 10,000,000 tokens."), code="invalid_input"
        )
    with transaction.atomic():
        stored, _created = ProviderEndpoint.objects.update_or_create(
            provider=PROVIDER, defaults={"base_url": url, "model": name}
        )
        catalog.register_local_model(PROVIDER, name, context_window=context_window)
    return stored


def delete() -> bool:
    deleted, _by_model = ProviderEndpoint.objects.filter(provider=PROVIDER).delete()
    return deleted > 0


def clean_url(value: str) -> str:
    url = value.strip().rstrip("/")
    if not url:
        raise MissionError(_("The endpoint needs a base URL."), code="invalid_input")
    if len(url) > MAX_URL:
        raise MissionError(
            _("A base URL has at most %(count)d characters.") % {"count": MAX_URL},
            code="invalid_input",
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises on a port that is not a number
    except ValueError:
        raise MissionError(_("This is not a URL."), code="invalid_input") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MissionError(
            _(
                "The base URL starts with http:// or https:// and names a host, e.g. "
                "http://127.0.0.1:8080/v1."
            ),
            code="invalid_input",
        )
    if parts.username or parts.password:
        raise MissionError(
            _("Put no user or password in the base URL: set the key in its own field."),
            code="invalid_input",
        )
    if parts.query or parts.fragment:
        raise MissionError(
            _("A base URL has no query (?…) or fragment (#…)."), code="invalid_input"
        )
    return url


def clean_model(value: str) -> str:
    name = value.strip()
    if not name:
        raise MissionError(_("The endpoint needs a model name."), code="invalid_input")
    if len(name) > MAX_MODEL or any(c.isspace() for c in name):
        raise MissionError(
            _(
                "A model name is at most %(count)d characters without spaces, e.g. "
                "qwen2.5-coder:32b."
            )
            % {"count": MAX_MODEL},
            code="invalid_input",
        )
    return name
