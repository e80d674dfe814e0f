"""The owner's changes to the model providers: a key set or forgotten, the OpenAI-compatible
endpoint set or removed; and to the Web search backend (logged as the provider "web search").
One function per change, each its own transaction with its security-log event
(`provider.changed`: by whom, never what), called alike by the Settings screen
(`missions.provider_views`, `missions.web_views`) and the API (`missions.api`)."""

from __future__ import annotations

from django.db import transaction

from agentos.core import audit
from agentos.core.models import AuditEvent
from missions import endpoints, keys, search
from missions.models import ProviderEndpoint, ProviderKey, SearchBackend


def _changed(actor: audit.Actor, provider: str, change: str) -> None:
    audit.record_by(
        AuditEvent.Kind.PROVIDER_CHANGED, actor, provider=provider, change=change, by=actor.by
    )


def set_provider_key(*, provider: str, key: str, actor: audit.Actor) -> ProviderKey:
    with transaction.atomic():
        stored = keys.put(provider, key)
        _changed(actor, provider, "key set")
    return stored


def forget_provider_key(*, provider: str, actor: audit.Actor) -> bool:
    """Forget a key set from the console (an environment variable still wins); False (and
    nothing in the log) when none was set."""
    with transaction.atomic():
        forgotten = keys.delete(provider)
        if forgotten:
            _changed(actor, provider, "key forgotten")
    return forgotten


def set_endpoint(
    *,
    base_url: str,
    model: str,
    context_window: int | None = None,
    key: str = "",
    actor: audit.Actor,
) -> ProviderEndpoint:
    """Set the compatible endpoint and, when given, its key: both or neither."""
    with transaction.atomic():
        stored = endpoints.put(base_url=base_url, model=model, context_window=context_window)
        _changed(actor, endpoints.PROVIDER, "endpoint set")
        if key:
            keys.put(endpoints.PROVIDER, key)
            _changed(actor, endpoints.PROVIDER, "key set")
    return stored


def remove_endpoint(*, actor: audit.Actor) -> bool:
    with transaction.atomic():
        removed = endpoints.delete()
        if removed:
            _changed(actor, endpoints.PROVIDER, "endpoint removed")
    return removed


SEARCH = "web search"


def set_search_backend(
    *, kind: str, url: str, bridge: str = "", actor: audit.Actor
) -> SearchBackend:
    """Set where `web_search` asks (`missions.search`); a bad URL or bridge is refused, nothing
    written."""
    backend = search.clean(kind=kind, url=url, bridge=bridge)
    with transaction.atomic():
        stored = search.put(backend)
        _changed(actor, SEARCH, f"{backend.kind} backend set")
    return stored


def remove_search_backend(*, actor: audit.Actor) -> bool:
    with transaction.atomic():
        removed = search.delete()
        if removed:
            _changed(actor, SEARCH, "backend removed")
    return removed
