"""What a model step cost, from the price version in force when it ran."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils import timezone

from kernel.budgets import Cost
from missions.models import ModelPrice
from missions.providers.base import Usage

PRICE_CACHE_SECONDS = 60  # a price edited in the admin applies within a minute


@functools.lru_cache(maxsize=256)
def _price_in_force(provider: str, model: str, bucket: int) -> ModelPrice | None:
    """The price row in force at the start of this minute (cached: one query a minute, not one
    per model step)."""
    moment = datetime.fromtimestamp(bucket * PRICE_CACHE_SECONDS, tz=UTC)
    return (
        ModelPrice.objects.filter(provider=provider, model=model, valid_from__lte=moment)
        .order_by("-valid_from")
        .first()
    )


@dataclass(frozen=True)
class Priced:
    cost: Cost
    price_version: str | None  # None: no price known for this model, cost counted as zero


def price_of(*, provider: str, model: str, usage: Usage, at: datetime | None = None) -> Priced:
    """Tokens by kind times the newest price valid at `at`; cached tokens priced apart."""
    now = at or timezone.now()
    price = _price_in_force(provider, model, int(now.timestamp()) // PRICE_CACHE_SECONDS)
    micros = 0
    if price is not None:
        # Integer arithmetic in micro-dollars: rounding happens once, per step.
        micros = (
            usage.input_tokens * price.input_per_mtok
            + usage.output_tokens * price.output_per_mtok
            + usage.cache_read_tokens * price.cache_read_per_mtok
            + usage.cache_write_tokens * price.cache_write_per_mtok
            + 999_999
        ) // 1_000_000
    return Priced(
        cost=Cost(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            usd_micros=micros,
        ),
        price_version=price.version if price else None,
    )
