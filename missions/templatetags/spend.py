"""Ledger figures as the console writes them: dollars from micro-dollars, token counts."""

from __future__ import annotations

from django import template

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
