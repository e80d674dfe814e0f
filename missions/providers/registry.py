"""Providers by name, built lazily (the SDKs are slow to import and unused offline)."""

from __future__ import annotations

import os
from typing import Any

from missions.providers.base import AuthenticationFailed, Provider

KEYS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def has_key(provider: str) -> bool:
    return bool(os.environ.get(KEYS.get(provider, ""), ""))


def build(name: str, *, script: dict[str, Any] | None = None) -> Provider:
    if name == "scripted":
        from missions.providers.scripted import ScriptedProvider

        return ScriptedProvider(script or {})
    if not has_key(name):
        raise AuthenticationFailed(f"{KEYS.get(name, name)} is not set: no key for {name}.")
    if name == "anthropic":
        from missions.providers.anthropic import AnthropicProvider

        return AnthropicProvider()
    if name == "openai":
        from missions.providers.openai import OpenAIProvider

        return OpenAIProvider()
    raise ValueError(f"Unknown provider {name!r}; expected anthropic, openai or scripted.")
