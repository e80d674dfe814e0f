"""Costs of steps and the caps they are checked against."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cost:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    usd_micros: int = 0

    @property
    def tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    @property
    def is_zero(self) -> bool:
        return self.tokens == 0 and self.usd_micros == 0

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "usd_micros": self.usd_micros,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Cost:
        data = data or {}
        return cls(**{name: int(data.get(name, 0)) for name in cls().as_dict()})


NO_COST = Cost()

CAP_FIELDS = ("max_tokens", "max_usd_micros", "max_turns", "max_tool_calls")


@dataclass
class Ledger:
    """Totals of one run's subtree (or a mission), with its caps; None means no cap."""

    tokens: int = 0
    usd_micros: int = 0
    turns: int = 0
    tool_calls: int = 0
    caps: dict[str, int | None] = field(default_factory=dict)

    def crossed(self) -> str | None:
        """The first cap reached, by name, or None. Reaching a cap exactly counts as crossing."""
        for cap, spent in (
            ("max_tokens", self.tokens),
            ("max_usd_micros", self.usd_micros),
            ("max_turns", self.turns),
            ("max_tool_calls", self.tool_calls),
        ):
            limit = self.caps.get(cap)
            if limit is not None and spent >= limit:
                return cap
        return None


def validate_caps(caps: dict[str, Any]) -> dict[str, int | None]:
    """Caps from a contract or a form: known names only, non-negative integers or None."""
    from kernel.exceptions import KernelError

    clean: dict[str, int | None] = {}
    for name, value in caps.items():
        if name not in (*CAP_FIELDS, "max_seconds"):
            raise KernelError(f"Unknown budget cap {name!r}.", code="invalid_budget")
        if value is None:
            clean[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise KernelError(f"Budget cap {name} must be an integer.", code="invalid_budget")
        if value < 0:
            raise KernelError(
                f"Budget cap {name} cannot be negative (got {value}).", code="invalid_budget"
            )
        clean[name] = value
    return clean
