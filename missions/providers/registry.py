"""Providers by name, built lazily (the SDKs are slow to import and unused offline)."""

from __future__ import annotations

from typing import Any

from missions.providers.base import AuthenticationFailed, BadRequest, Provider

# The environment variable that, when set, wins over a key stored from the console. The
# compatible endpoint's is ours, not OPENAI_API_KEY: the two must never be mixed up.
KEYS = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "compatible": "AGENTOS_COMPATIBLE_API_KEY",
}
# Providers that work without a key (a local server usually checks none).
KEY_OPTIONAL = frozenset({"compatible"})


def has_key(provider: str) -> bool:
    from missions import keys

    return provider in KEYS and keys.get(provider) is not None


def ready(provider: str) -> bool:
    """Whether a run can be sent to `provider`: its key is set, or for the compatible endpoint,
    its base URL and model are (its key is optional)."""
    if provider == "scripted":
        return True
    if provider in KEY_OPTIONAL:
        from missions import endpoints

        return endpoints.get(provider) is not None
    return has_key(provider)


def build(name: str, *, script: dict[str, Any] | None = None) -> Provider:
    if name == "scripted":
        from missions.providers.scripted import ScriptedProvider

        return ScriptedProvider(script or {})
    from missions import keys

    key = keys.get(name) if name in KEYS else None
    if name in KEYS and name not in KEY_OPTIONAL and key is None:
        raise AuthenticationFailed(
            f"{KEYS[name]} is not set and no key was saved in the settings: no key for {name}."
        )
    if name == "anthropic":
        from missions.providers.anthropic import AnthropicProvider

        return AnthropicProvider(api_key=key)
    if name == "openai":
        from missions.providers.openai import OpenAIProvider

        return OpenAIProvider(api_key=key)
    if name == "compatible":
        from missions import endpoints
        from missions.providers.compatible import CompatibleProvider

        endpoint = endpoints.get(name)
        if endpoint is None:
            raise BadRequest(
                "The OpenAI-compatible endpoint has no base URL and model: set them in Settings."
            )
        return CompatibleProvider(base_url=endpoint.base_url, api_key=key)
    raise ValueError(f"Unknown provider {name!r}; expected {', '.join([*KEYS, 'scripted'])}.")
