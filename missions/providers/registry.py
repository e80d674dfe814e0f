"""Providers by name, built lazily (the SDKs are slow to import and unused offline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from missions.providers.base import AuthenticationFailed, BadRequest, Provider
from missions.providers.scripted import ScriptedProvider

# The environment variable that, when set, wins over a key stored from the console. The
# compatible endpoint's is ours, not OPENAI_API_KEY: the two must never be mixed up.
KEYS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "compatible": "AGENTOS_COMPATIBLE_API_KEY",
}
# Providers that work without a key (a local server usually checks none).
KEY_OPTIONAL = frozenset({"compatible"})


class Endpoint(Protocol):
    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str: ...


# Where keys and endpoints are kept is the missions app's business (`missions.keys`,
# `missions.endpoints`, which know this module): it hands them over in its `ready()`.
_key_of: Callable[[str], str | None] = lambda provider: None  # noqa: E731
_endpoint_of: Callable[[str], Endpoint | None] = lambda provider: None  # noqa: E731


def use(*, keys: Callable[[str], str | None], endpoints: Callable[[str], Endpoint | None]) -> None:
    """Read each provider's key and endpoint from these from now on."""
    global _key_of, _endpoint_of
    _key_of, _endpoint_of = keys, endpoints


def key(provider: str) -> str | None:
    """The key to call `provider` with (the environment's, else the one the owner saved)."""
    return _key_of(provider) if provider in KEYS else None


def endpoint(provider: str) -> Endpoint | None:
    """Where an owner-run provider is served (the compatible endpoint), if the owner said."""
    return _endpoint_of(provider)


def has_key(provider: str) -> bool:
    return key(provider) is not None


def ready(provider: str) -> bool:
    """Whether a run can be sent to `provider`: its key is set, or for the compatible endpoint,
    its base URL and model are (its key is optional)."""
    if provider == "scripted":
        return True
    if provider in KEY_OPTIONAL:
        return endpoint(provider) is not None
    return has_key(provider)


def build(name: str, *, script: dict[str, Any] | None = None) -> Provider:
    # The adapters are imported here: each imports its SDK, slow to import and unused offline.
    if name == "scripted":
        return ScriptedProvider(script or {})
    api_key = key(name)
    if name in KEYS and name not in KEY_OPTIONAL and api_key is None:
        raise AuthenticationFailed(
            f"{KEYS[name]} is not set and no key was saved in the settings: no key for {name}."
        )
    if name == "anthropic":
        from missions.providers.anthropic import AnthropicProvider

        return AnthropicProvider(api_key=api_key)
    if name == "openai":
        from missions.providers.openai import OpenAIProvider

        return OpenAIProvider(api_key=api_key)
    if name == "compatible":
        from missions.providers.compatible import CompatibleProvider

        served = endpoint(name)
        if served is None:
            raise BadRequest(
                "The OpenAI-compatible endpoint has no base URL and model: set them in Settings."
            )
        return CompatibleProvider(base_url=served.base_url, api_key=api_key)
    raise ValueError(f"Unknown provider {name!r}; expected {', '.join([*KEYS, 'scripted'])}.")
