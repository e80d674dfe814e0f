"""One small request to a provider with the key in use, through the adapter a run would use: what
the Settings page's Test button answers, in plain words.

A few tokens at most (16 output tokens, the smallest OpenAI accepts), not journaled: nothing of
the owner's work is sent, only a fixed prompt. The key is never part of the answer: a provider
that quotes it back in an error has it blanked out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.utils.translation import gettext as _

from missions import catalog, endpoints, keys
from missions.providers import registry
from missions.providers.base import (
    Completed,
    Conversation,
    Options,
    ProviderError,
    TextDelta,
    Usage,
)

PROMPT = "Reply with the single word OK."
MAX_OUTPUT_TOKENS = 16
TIMEOUT_SECONDS = 30.0
MAX_DETAIL = 400


@dataclass(frozen=True)
class Trial:
    provider: str
    model: str | None
    ok: bool
    summary: str  # what it means, in plain words
    detail: str = ""  # the provider's own words, or the model's answer
    seconds: float = 0.0
    usage: Usage | None = None


def try_provider(provider: str) -> Trial:
    """1. Pick the model (the compatible endpoint's own, else the executor's, else the first
    seeded). 2. Build the adapter with the key in use. 3. Stream the fixed prompt and report."""
    if provider not in registry.KEYS:
        return Trial(provider, None, False, _("Unknown provider."))
    if provider == endpoints.PROVIDER:
        endpoint = endpoints.get()
        if endpoint is None:
            return Trial(provider, None, False, _("Nothing to test: save a base URL and model."))
        model: str | None = endpoint.model
    else:
        model = catalog.default_model(provider)
    if model is None:
        return Trial(provider, None, False, _("No model is set for this provider."))
    if not registry.ready(provider):
        return Trial(provider, model, False, _("Nothing to test: set the key first."))
    started = time.monotonic()
    text: list[str] = []
    try:
        adapter = registry.build(provider)
        thread = Conversation(provider, system="", items=[adapter.user_message(PROMPT)])
        options = Options(
            model=model,
            max_output_tokens=MAX_OUTPUT_TOKENS,
            cache_prefix=False,
            timeout_seconds=TIMEOUT_SECONDS,
        )
        for event in adapter.stream(thread, [], options):
            if isinstance(event, Completed):
                answer = "".join(text).strip()
                return Trial(
                    provider,
                    model,
                    True,
                    _("The model answered."),
                    detail=_scrub(answer, provider),
                    seconds=time.monotonic() - started,
                    usage=event.usage,
                )
            if isinstance(event, TextDelta):
                text.append(event.text)
    except ProviderError as error:
        return Trial(
            provider,
            model,
            False,
            _plain(error, model),
            detail=_scrub(error.message, provider),
            seconds=time.monotonic() - started,
        )
    return Trial(provider, model, False, _("The answer stopped before its end."))


def _plain(error: ProviderError, model: str) -> str:
    words = {
        "authentication_failed": _("The provider refused the key (or the account cannot pay)."),
        "unknown_model": _("The provider does not know the model %(model)s.") % {"model": model},
        "rate_limited": _("The provider is limiting this key's requests: try again shortly."),
        "overloaded": _(
            "The provider is overloaded, or a local server is still loading its model: try "
            "again shortly."
        ),
        "server_error": _("The provider failed on its side."),
        "stream_interrupted": _(
            "Nothing answered at that address, or the connection dropped: check that the "
            "server runs and the address is right."
        ),
        "context_too_long": _("The provider found the request too long for the model."),
        "bad_request": _("The provider refused the request."),
    }
    return words.get(error.code, _("The provider answered with an error."))


def _scrub(text: str, provider: str) -> str:
    key = keys.get(provider)
    if key:
        text = text.replace(key, "…")
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"
