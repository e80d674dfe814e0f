"""Budgets: what a step costs (`Cost`), a ledger's totals against its caps (`Ledger`), the
caps accepted from a contract or a form (`validate_caps`), and the global governors
(`GlobalBudget`: a daily spend cap and a cap on runs executing at once), read and changed here.

The debits are `kernel.debits`' statements, which `kernel.journal` sends with the step's result
(one statement, up the run tree); the checks against the caps are `kernel.metering.Meter`'s, and
the concurrency caps are applied by the claim (`kernel.scheduler`). See docs/design.md §10.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from agentos.core import audit
from agentos.core.models import AuditEvent
from kernel.exceptions import KernelError
from kernel.models import DailySpend, GlobalBudget, ProviderSpend, Run


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
    """Totals of one run's subtree (or an account), with its caps; None means no cap."""

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


# The global governors (`GlobalBudget`, one row): a daily spend cap in micro-dollars and a cap
# on runs executing at once across every account (0 holds every run back), then the caps a
# new mission gets when it sets none of its own; each name maps to the largest value its column
# holds. Those in NO_CAP may be null, the owner's "no cap", and are at least 1 otherwise: a cap
# of 0 would stop everything at once.
GLOBAL_CAPS = {
    "daily_usd_micros": 2**63 - 1,
    "max_running_runs": 2**31 - 1,
    "mission_usd_micros": 2**63 - 1,
    "mission_tokens": 2**63 - 1,
    "mission_seconds": 2**31 - 1,
}
NO_CAP = frozenset({"daily_usd_micros", "mission_usd_micros", "mission_tokens", "mission_seconds"})
# A mission's cap, by the global default it takes when the mission sets none (`missions.launch`).
MISSION_DEFAULTS = {
    "max_usd_micros": "mission_usd_micros",
    "max_tokens": "mission_tokens",
    "max_seconds": "mission_seconds",
}


def global_caps() -> dict[str, int | None]:
    """The global caps in force: the row's, or the model's defaults while none was saved."""
    budget = GlobalBudget.objects.order_by("pk").first() or GlobalBudget()
    return {name: getattr(budget, name) for name in GLOBAL_CAPS}


def mission_defaults() -> dict[str, int | None]:
    """The caps a mission that sets none of its own gets, by the mission's cap names."""
    caps = global_caps()
    return {cap: caps[name] for cap, name in MISSION_DEFAULTS.items()}


def set_global_caps(changes: dict[str, Any], *, actor: audit.Actor) -> dict[str, int | None]:
    """Change some global caps (the console's Agents screen, the admin and the API's PATCH); all
    or nothing, with its `policy.changed` event (the caps in force after the change) in the same
    transaction.

    Readers (`kernel.scheduler`, `kernel.metering`) take the row of lowest id, as written here.
    """
    for name, value in changes.items():
        if name not in GLOBAL_CAPS:
            raise KernelError(
                f"Unknown global cap {name!r}; caps: {', '.join(GLOBAL_CAPS)}.",
                code="invalid_budget",
            )
        if value is None and name in NO_CAP:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise KernelError(f"Global cap {name} must be an integer.", code="invalid_budget")
        # A cap of 0 would read as "no cap" or stop everything: say null for no cap, not 0.
        low = 1 if name in NO_CAP else 0
        if not low <= value <= GLOBAL_CAPS[name]:
            raise KernelError(
                f"Global cap {name} is between {low} and {GLOBAL_CAPS[name]} (got {value}).",
                code="invalid_budget",
            )
    with transaction.atomic():
        budget = GlobalBudget.objects.select_for_update().order_by("pk").first() or GlobalBudget()
        for name, value in changes.items():
            setattr(budget, name, value)
        budget.save()
        caps = {name: getattr(budget, name) for name in GLOBAL_CAPS}
        audit.record_by(AuditEvent.Kind.POLICY_CHANGED, actor, **caps)
    return caps


PERIODS = ("day", "month")
EVERY = "*"  # the provider caps of each provider not named


def provider_caps() -> dict[str, dict[str, int | None]]:
    """Each capped provider's spend caps per UTC day and month, micro-dollars (None: no cap);
    `EVERY`'s apply to each provider not named (the defaults while no row is saved)."""
    budget = GlobalBudget.objects.order_by("pk").first() or GlobalBudget()
    return {name: dict(caps) for name, caps in (budget.provider_caps or {}).items()}


def caps_of(caps: dict[str, dict[str, int | None]], provider: str) -> dict[str, int | None]:
    """The caps that apply to `provider`: its own, else those of every provider."""
    return caps.get(provider) or caps.get(EVERY) or {}


def set_provider_caps(
    provider: str, *, day: int | None, month: int | None, actor: audit.Actor
) -> dict[str, dict[str, int | None]]:
    """Set a model provider's daily and monthly spend caps (`EVERY`: of each provider not
    named; None: no cap for that period, whatever `EVERY` says), with its `policy.changed`
    event in the same transaction; model calls past one are refused
    (`kernel.metering.Meter.check_provider`)."""
    if not isinstance(provider, str) or not provider.strip() or len(provider) > 40:
        raise KernelError("A provider is named by 1 to 40 characters.", code="invalid_budget")
    for period, value in (("day", day), ("month", month)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
            raise KernelError(
                f"The {period} cap of {provider} is an integer of micro-dollars, at least 1"
                f" (got {value!r}); null for none.",
                code="invalid_budget",
            )
    with transaction.atomic():
        budget = GlobalBudget.objects.select_for_update().order_by("pk").first() or GlobalBudget()
        caps = dict(budget.provider_caps or {})
        caps[provider] = {"day": day, "month": month}
        budget.provider_caps = caps
        budget.save()
        audit.record_by(AuditEvent.Kind.POLICY_CHANGED, actor, provider_caps=caps)
    return caps


def provider_spent(provider: str, since: datetime) -> int:
    """What the model calls of `provider` cost since `since` (a UTC midnight: a day's or a
    month's start), micro-dollars: the provider's days (`ProviderSpend`), debited with each model
    step's result. A few rows, whatever the journal's size: this is read as an execution starts."""
    spent = ProviderSpend.objects.filter(
        provider=provider, day__gte=since.astimezone(UTC).date()
    ).aggregate(total=Sum("usd_micros"))["total"]
    return int(spent or 0)


def charge(run_id: int, usd_micros: int) -> None:
    """A cost outside any step (a bridged API call, `cluster.egress`): added to the run's and its
    ancestors' totals and to today's spend, in one transaction. The caps see it at the run's
    next step, as they see every debit."""
    if usd_micros <= 0:
        return
    ancestors = Run.objects.filter(pk=run_id).values_list("ancestors", flat=True).first()
    if ancestors is None:
        return
    with transaction.atomic():
        # Ascending ids, as the step debits lock a tree's rows.
        Run.objects.filter(pk__in=sorted([*ancestors, run_id])).update(
            usd_micros=F("usd_micros") + usd_micros
        )
        day = timezone.now().astimezone(UTC).date()
        spent, created = DailySpend.objects.select_for_update().get_or_create(
            day=day, defaults={"usd_micros": usd_micros}
        )
        if not created:
            DailySpend.objects.filter(pk=spent.pk).update(usd_micros=F("usd_micros") + usd_micros)
