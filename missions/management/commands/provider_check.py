"""`manage.py provider_check --provider anthropic|openai|compatible [--model M] [PROMPT]`: one
small request with the configured key (optional for the compatible endpoint, whose model is the
endpoint's), through the same adapter a run uses.

Prints every normalised event as one JSON line, then `{"usage": ..., "usd_micros": ...,
"price_version": ...}`. ANTHROPIC_BASE_URL / OPENAI_BASE_URL are read by the SDKs, which is how an
owner tries a gateway before pointing missions at it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from missions import catalog, endpoints, pricing
from missions.providers import registry
from missions.providers.base import Completed, Conversation, Event, Options, ProviderError

DEFAULT_PROMPT = "Say hello in five words."
# Room for a reasoning model's hidden thinking before its five words; still a cent at most.
MAX_OUTPUT_TOKENS = 1024


class Command(BaseCommand):
    help = "Send one small request to a provider with the configured key and print what came back."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--provider", required=True, help="anthropic, openai or compatible")
        parser.add_argument("--model", help="Default: the executor's model, else the first seeded.")
        parser.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT, help=repr(DEFAULT_PROMPT))

    def handle(
        self, *args: Any, provider: str, model: str | None, prompt: str, **options: Any
    ) -> None:
        if provider not in registry.KEYS:
            raise CommandError(
                f"Unknown provider {provider!r}; expected {' or '.join(registry.KEYS)}."
            )
        if provider == endpoints.PROVIDER:
            endpoint = endpoints.get()
            if endpoint is None:
                raise CommandError(
                    "No compatible endpoint is set: save its base URL and model in Settings"
                    " (or PUT /api/v1/settings/compatible-endpoint)."
                )
            model = model or endpoint.model
        elif not registry.has_key(provider):
            raise CommandError(f"{registry.KEYS[provider]} is not set: no key for {provider}.")
        model = model or catalog.default_model(provider)
        if model is None:
            raise CommandError(f"No model given and none seeded for {provider}: pass --model.")
        final: Completed | None = None
        try:
            adapter = registry.build(provider)
            thread = Conversation(provider, system="", items=[adapter.user_message(prompt)])
            small = Options(model=model, max_output_tokens=MAX_OUTPUT_TOKENS, cache_prefix=False)
            for event in adapter.stream(thread, [], small):
                self._line(event_line(event))
                if isinstance(event, Completed):
                    final = event
        except ProviderError as error:
            # The provider's own words: for an unknown model they usually list what is allowed.
            subject = (
                f"model {model!r} on {provider}" if error.code == "unknown_model" else provider
            )
            raise CommandError(f"{error.code} ({subject}): {error.message}") from error
        if final is None:  # the Provider protocol forbids it; an adapter bug, said plainly
            raise CommandError(f"{provider}: the stream ended without a completed response.")
        priced = pricing.price_of(provider=provider, model=model, usage=final.usage)
        self._line(
            {
                "usage": asdict(final.usage),
                "usd_micros": priced.cost.usd_micros,
                "price_version": priced.price_version,
            }
        )

    def _line(self, payload: dict[str, Any]) -> None:
        self.stdout.write(json.dumps(payload, ensure_ascii=False))
        self.stdout.flush()  # the deltas show up as they stream, not at the end


def event_line(event: Event) -> dict[str, Any]:
    # TextDelta -> "text_delta", ToolCall -> "tool_call", Completed -> "completed".
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", type(event).__name__).lower()
    return {"event": name, **asdict(event)}
