"""Ledger figures as the console writes them: dollars from micro-dollars, token counts, caps."""

from __future__ import annotations

from django import template
from django.utils.translation import gettext

register = template.Library()


@register.filter
def usd(micros: int | None) -> str:
    """`1234567` → `$1.23`; small amounts keep the digits that make them non-zero (`$0.0042`),
    so a cheap step never reads as free. None (unknown) stays unknown."""
    if micros is None:
        return "unknown"
    micros = int(micros)
    if micros == 0:
        return "$0.00"
    if micros >= 1_000_000:
        return f"${micros / 1_000_000:,.2f}"
    # Under a dollar: up to 4 decimals (6 under a cent), trailing zeros dropped but 2 kept.
    digits = 4 if micros >= 10_000 else 6
    whole, _, fraction = f"{micros / 1_000_000:.{digits}f}".partition(".")
    return f"${whole}.{fraction.rstrip('0').ljust(2, '0')}"


@register.filter
def tokens(count: int | None) -> str:
    """`1234567` → `1,234,567` (None: unknown)."""
    if count is None:
        return "unknown"
    return f"{int(count):,}"


@register.filter
def cap(micros: int | None) -> str:
    """A spend cap: dollars, or "none" (None is the owner's "no cap")."""
    return gettext("none") if micros is None else usd(micros)


@register.filter
def cap_tokens(count: int | None) -> str:
    """A token cap: `2000000` → `2,000,000`, None → "none"."""
    return gettext("none") if count is None else tokens(count)


@register.filter
def wall_time(seconds: int | None) -> str:
    """A wall-time cap: `14400` → `4 h`, `5400` → `90 min`, None → "none"."""
    if seconds is None:
        return gettext("none")
    seconds = int(seconds)
    if seconds % 3600 == 0:
        return gettext("%(hours)d h") % {"hours": seconds // 3600}
    return gettext("%(minutes)d min") % {"minutes": -(-seconds // 60)}
