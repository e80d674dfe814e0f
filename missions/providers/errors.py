"""Every provider failure in one of a few kinds, the same for the three providers, and what to do
about it: wait it out (transient), ask the owner (their key or their account), or fail.

The adapters already turn the SDKs' exceptions into `ProviderError`s, raised `from` the SDK's
own exception; `classify` reads both, so a timeout is told from a dropped connection, and an
unpaid account from a refused key, whatever the provider. The engine reads nothing else
(`missions.engine.outage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import httpx2

from missions.providers.base import (
    Aborted,
    AuthenticationFailed,
    Overloaded,
    ProviderError,
    RateLimited,
    ServerError,
    StreamInterrupted,
)

Kind = Literal[
    "rate_limited",
    "overloaded",
    "server_error",
    "network",
    "timeout",
    "authentication",
    "quota",
    "invalid_request",
]

# Worth waiting out: the same request will likely succeed later without anyone doing anything.
TRANSIENT: frozenset[Kind] = frozenset(
    {"rate_limited", "overloaded", "server_error", "network", "timeout"}
)
# Settled by the owner (a new key, a paid bill), after which the same request is worth sending.
OWNER_FIXES: frozenset[Kind] = frozenset({"authentication", "quota"})

# In the owner's words, after the provider's name: "Anthropic overloaded (529)".
WORDS: dict[Kind, str] = {
    "rate_limited": "rate limited",
    "overloaded": "overloaded",
    "server_error": "server error",
    "network": "unreachable",
    "timeout": "timed out",
    "authentication": "refused the key",
    "quota": "out of quota or credit",
    "invalid_request": "refused the request",
}

PROVIDER_NAMES = {"anthropic": "Anthropic", "openai": "OpenAI", "compatible": "The endpoint"}

# How the providers say an account cannot pay (the rest of their 4xx are invalid requests).
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_error"})


@dataclass(frozen=True)
class Trouble:
    kind: Kind
    retry_after: float | None  # seconds, when the provider said so
    status: int | None  # the HTTP status, when there was one
    message: str

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT

    @property
    def owner_fixes(self) -> bool:
        return self.kind in OWNER_FIXES

    def describe(self, provider: str) -> str:
        """ "Anthropic overloaded (529)": the provider by name, what is wrong, its status."""
        name = PROVIDER_NAMES.get(provider, provider)
        status = f" ({self.status})" if self.status else ""
        return f"{name} {WORDS[self.kind]}{status}"


def classify(error: ProviderError) -> Trouble:
    """The kind of a provider's failure, from our error and the SDK exception it was raised from.

    1. The transport first: an SDK timeout (or httpx's) is `timeout`; any other connection
       failure (refused, reset, dropped mid-stream) is `network`.
    2. An unpaid account is `quota` whatever its status (OpenAI says 429 `insufficient_quota`,
       Anthropic 402 or `billing_error`).
    3. Then the adapter's own reading: rate limited, overloaded, server error, refused key;
       everything permanent that is left is an invalid request.
    """
    # The SDKs take about two seconds to import: every process imports this module as it starts,
    # and only one that has called a model (and so imported them) ever classifies its failure.
    import anthropic
    import openai

    cause = error.__cause__
    status = _status(cause)
    retry_after = error.retry_after
    if isinstance(
        cause, anthropic.APITimeoutError | openai.APITimeoutError | httpx2.TimeoutException
    ):
        return Trouble("timeout", retry_after, None, error.message)
    if isinstance(
        cause, anthropic.APIConnectionError | openai.APIConnectionError | httpx2.TransportError
    ):
        return Trouble("network", retry_after, None, error.message)
    if status == 402 or _code(cause) in _QUOTA_CODES:
        return Trouble("quota", None, status, error.message)
    kind: Kind
    if isinstance(error, RateLimited):
        kind = "rate_limited"
    elif isinstance(error, Overloaded):
        kind = "overloaded"
    elif isinstance(error, StreamInterrupted):
        kind = "network"
    elif isinstance(error, AuthenticationFailed):
        kind = "authentication"
    elif isinstance(error, ServerError) or not (error.permanent or isinstance(error, Aborted)):
        kind = "server_error"
    else:
        kind = "invalid_request"
    return Trouble(kind, retry_after if kind in TRANSIENT else None, status, error.message)


def _status(cause: BaseException | None) -> int | None:
    import anthropic
    import openai

    if isinstance(cause, anthropic.APIStatusError | openai.APIStatusError):
        # A mid-stream error event arrives on a 200 response: no status worth showing.
        return cause.status_code if cause.status_code >= 400 else None
    return None


def _code(cause: BaseException | None) -> str | None:
    """OpenAI's `error.code`, or Anthropic's `error.type` (its only code)."""
    import anthropic
    import openai

    if isinstance(cause, openai.APIError):
        return cause.code
    if isinstance(cause, anthropic.APIStatusError):
        return cause.type
    return None
