"""Providers by name, built lazily (the SDKs are slow to import and unused offline)."""

from __future__ import annotations

from typing import Any

from missions.providers.base import AuthenticationFailed, Provider

KEYS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def has_key(provider: str) -> bool:
    from missions import keys

    return provider in KEYS and keys.get(provider) is not None


def build(name: str, *, script: dict[str, Any] | None = None) -> Provider:
    if name == "scripted":
        from missions.providers.scripted import ScriptedProvider

        return ScriptedProvider(script or {})
    from missions import keys

    key = keys.get(name) if name in KEYS else None
    if name in KEYS and key is None:
        raise AuthenticationFailed(
            f"{KEYS[name]} is not set and no key was saved in the settings: no key for {name}."
        )
    if name == "anthropic":
        from missions.providers.anthropic import AnthropicProvider

        return AnthropicProvider(api_key=key)
    if name == "openai":
        from missions.providers.openai import OpenAIProvider

        return OpenAIProvider(api_key=key)
    raise ValueError(f"Unknown provider {name!r}; expected anthropic, openai or scripted.")
