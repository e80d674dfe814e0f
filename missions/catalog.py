"""The model catalog, prices and routing defaults that a fresh installation starts with.

First version of the price table: ARCHITECTURE.fr.md §7, figures of 2026-11-10. All of it is
editable in the admin; `seed` only adds what is missing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

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
    ("evaluator", "openai", "gpt-6.1-sol", "medium"),  # the other provider, as DESIGN.md asks
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
