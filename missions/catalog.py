"""The model catalog, prices and routing defaults that a fresh installation starts with, and the
catalog's refresh from the providers' model-listing APIs.

First version of the price table: the figures of 2026-11-10 (named by `SOURCE`). All of it is
editable in the admin; `seed` only adds what is missing, `refresh` only adds and updates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from missions.models import ModelInfo, ModelPrice, Role, RoleRoute
from missions.providers import registry
from missions.providers.base import (
    AuthenticationFailed,
    BadRequest,
    ProviderError,
    StreamInterrupted,
    UnknownModel,
)

VERSION = "2026-11-10"
SOURCE = "ARCHITECTURE.fr.md §7, 2026-11-10"
# (provider, model, input $/Mtok, output $/Mtok). The seed gives input and output only; cache
# prices follow the providers' published multipliers of that time: Anthropic reads 0.1x and
# writes 1.25x the input price, OpenAI reads cached input at 0.1x and charges no cache write.
PRICES = [
    ("anthropic", "claude-fable-5-2", 8, 40),
    ("anthropic", "claude-opus-5-5", 4, 20),
    ("anthropic", "claude-sonnet-5-5", 2, 10),
    ("anthropic", "claude-haiku-5-5", 0.10, 0.50),
    ("openai", "gpt-6-astra", 10, 50),
    ("openai", "gpt-6.1-sol", 2, 10),
    ("openai", "gpt-6.1-terra", 1, 5),
    ("openai", "gpt-6-luna", 0.10, 0.50),
    ("scripted", "scripted", 0, 0),
]
ROUTES = [
    ("planner", "anthropic", "claude-fable-5-2", "high"),
    ("executor", "anthropic", "claude-opus-5-5", "medium"),
    ("evaluator", "openai", "gpt-6.1-sol", "medium"),  # the other provider (docs/design.md §16)
    ("memory_consolidator", "anthropic", "claude-haiku-5-5", "low"),
    ("classifier", "openai", "gpt-6-luna", "low"),
]


def seed(price: Any, info: Any, route: Any) -> None:
    """Add the first price version, catalog entries and role defaults (models passed in, so
    a migration can use its historical models)."""
    valid_from = datetime(2026, 11, 10, tzinfo=UTC)
    for provider, model, input_usd, output_usd in PRICES:
        micros_in = round(input_usd * 1_000_000)
        price.objects.get_or_create(
            version=VERSION,
            provider=provider,
            model=model,
            defaults={
                "valid_from": valid_from,
                "input_per_mtok": micros_in,
                "output_per_mtok": round(output_usd * 1_000_000),
                "cache_read_per_mtok": micros_in // 10,
                "cache_write_per_mtok": micros_in * 5 // 4 if provider == "anthropic" else 0,
                "source": SOURCE,
            },
        )
        info.objects.get_or_create(provider=provider, model=model)
    for role, provider, model, effort in ROUTES:
        route.objects.get_or_create(
            role=role, defaults={"provider": provider, "model": model, "effort": effort}
        )


def default_model(provider: str) -> str | None:
    """The executor's model when the executor runs on `provider`, else its first seeded model
    (the compatible endpoint: the model the owner named for it)."""
    route = RoleRoute.objects.filter(role=Role.EXECUTOR, provider=provider).first()
    if route is not None:
        return route.model
    if provider == "compatible":
        endpoint = registry.endpoint(provider)
        return endpoint.model if endpoint else None
    return next((model for name, model, *_ in PRICES if name == provider), None)


# Owner-run models cost nothing per token unless the owner prices them (a newer ModelPrice row
# in the admin wins: `pricing` takes the newest in force).
LOCAL_VERSION = "local"
LOCAL_SOURCE = "an owner-run endpoint: free unless priced in the admin"


def register_local_model(
    provider: str, model: str, *, context_window: int | None = None
) -> ModelInfo:
    """Enter an owner-run model in the catalog, priced zero if it has no price yet; a window
    given is recorded, none given leaves the known one (or unknown)."""
    info, _ = ModelInfo.objects.get_or_create(provider=provider, model=model)
    if context_window is not None and info.context_window != context_window:
        info.context_window = context_window
        info.save(update_fields=["context_window"])
    if not ModelPrice.objects.filter(provider=provider, model=model).exists():
        ModelPrice.objects.create(
            version=LOCAL_VERSION,
            provider=provider,
            model=model,
            # In force for any run, whenever it started.
            valid_from=datetime(2000, 1, 1, tzinfo=UTC),
            input_per_mtok=0,
            output_per_mtok=0,
            cache_read_per_mtok=0,
            cache_write_per_mtok=0,
            source=LOCAL_SOURCE,
        )
    return info


# --- Refresh from the model-listing APIs ----------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    """One model as a listing API described it; None where the API said nothing."""

    model: str
    display_name: str | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    capabilities: dict[str, Any] | None = None


def refresh(provider: str, *, client: Any | None = None) -> list[ModelInfo]:
    """Upsert one `ModelInfo` per model the provider lists; return them in the API's order.

    1. List every model (all pages) through the official SDK, with the adapter's client setup
       (key and base URL from the environment unless `client` is given). A failure raises the
       adapters' typed `ProviderError` before anything is written.
    2. Write in one transaction, stamping `fetched_at`. Only what the API reported is written: a
       field it left out keeps its value, so a new row keeps null (unknown stays unknown) and an
       owner's figure typed in the admin is not erased by a terser API. Models missing from the
       listing are never deleted: seeded rows and their prices stay usable.
    """
    listed = _list_models(provider, client)
    now = timezone.now()
    rows = []
    with transaction.atomic():
        for entry in listed:
            reported = {
                key: value
                for key, value in asdict(entry).items()
                if value is not None and key != "model"
            }
            row, _ = ModelInfo.objects.update_or_create(
                provider=provider, model=entry.model, defaults={**reported, "fetched_at": now}
            )
            rows.append(row)
    return rows


def refresh_if_stale(
    provider: str, max_age: timedelta = timedelta(days=1), *, client: Any | None = None
) -> list[ModelInfo] | None:
    """The catalog as a cache of the listing API: call it only when a key is set and the newest
    fetch is older than `max_age` (or there was none). None: the API was not called.

    A failed refresh raises and stamps nothing, so the next call tries again.
    """
    if not registry.ready(provider):
        return None
    newest = ModelInfo.objects.filter(provider=provider).aggregate(newest=Max("fetched_at"))
    if newest["newest"] is not None and timezone.now() - newest["newest"] < max_age:
        return None
    return refresh(provider, client=client)


def _list_models(provider: str, client: Any | None) -> list[Listed]:
    # The SDKs are imported here, not at the top: migrations import this module for `seed`.
    if provider == "anthropic":
        return _list_anthropic(client)
    if provider == "openai":
        return _list_openai(client)
    if provider == "compatible":
        return _list_compatible(client)
    raise ValueError(f"Unknown provider {provider!r}; expected anthropic, openai or compatible.")


def _list_anthropic(client: Any | None) -> list[Listed]:
    import anthropic

    from missions.providers.anthropic import AnthropicProvider, status_error

    # The adapter's constructor: the same env vars, and no SDK retries (a daily cache can wait).
    sdk = AnthropicProvider(client=client).client
    try:
        # Iterating the page follows `has_more`/`last_id` through every page.
        return [
            Listed(
                model=entry.id,
                display_name=getattr(entry, "display_name", None) or None,
                # Only newer API versions send these; a gateway may send neither.
                context_window=_count(getattr(entry, "max_input_tokens", None)),
                max_output_tokens=_count(getattr(entry, "max_tokens", None)),
                capabilities=_json_object(getattr(entry, "capabilities", None)),
            )
            for entry in sdk.models.list()
        ]
    except anthropic.APIStatusError as error:
        raise _listing_error(status_error(error)) from error
    except anthropic.APIConnectionError as error:
        raise StreamInterrupted(str(error)) from error
    except anthropic.CredentialsError as error:
        raise AuthenticationFailed(str(error)) from error


def _list_openai(client: Any | None) -> list[Listed]:
    import openai

    # The adapter's own error mapping, reused rather than copied, so a 401, an
    # `insufficient_quota` 429 or a 503 mean the same thing here as in a run.
    from missions.providers.openai import OpenAIProvider, status_error

    sdk = OpenAIProvider(client=client).client  # raises AuthenticationFailed without a key
    try:
        # OpenAI lists ids only (plus owner and creation date): no window, no output cap.
        return [Listed(model=entry.id) for entry in sdk.models.list()]
    except openai.APIStatusError as error:
        raise _listing_error(status_error(error)) from error
    except openai.APIConnectionError as error:
        raise StreamInterrupted(error.message) from error


def _list_compatible(client: Any | None) -> list[Listed]:
    import openai

    from missions.providers.compatible import CompatibleProvider, error_from_status

    endpoint = registry.endpoint("compatible")
    if endpoint is None and client is None:
        raise BadRequest("The OpenAI-compatible endpoint has no base URL: set it in Settings.")
    sdk = CompatibleProvider(
        base_url=endpoint.base_url if endpoint else "",
        api_key=registry.key("compatible"),
        client=client,
    ).client
    try:
        # vLLM says the window it serves (`max_model_len`); llama.cpp and Ollama say none.
        return [
            Listed(
                model=entry.id,
                context_window=_count((entry.model_extra or {}).get("max_model_len")),
            )
            for entry in sdk.models.list()
        ]
    except openai.APIStatusError as error:
        raise _listing_error(error_from_status(error)) from error
    except openai.APIConnectionError as error:
        raise StreamInterrupted(error.message) from error


def _listing_error(error: ProviderError) -> ProviderError:
    # The adapters read a 404 as "no such model" because a request names one; a listing names
    # none, so a 404 means the endpoint is missing (a gateway without /v1/models).
    if isinstance(error, UnknownModel):
        return BadRequest(f"the model-listing endpoint was not found: {error.message}")
    return error


def _count(value: object) -> int | None:
    # bool is an int subclass; zero or a negative figure is no figure at all.
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _json_object(value: object) -> dict[str, Any] | None:
    # The SDK builds nested models for known shapes; a gateway's odd shape may stay a dict.
    if isinstance(value, dict):
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        result = to_dict(mode="json")
        return result if isinstance(result, dict) else None
    return None
