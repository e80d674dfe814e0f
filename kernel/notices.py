"""The owner is told once when a cap is 80 % used: a mission's spend or tokens (its account's
caps), a root run's wall time, the day's global spend, a provider's spend in a day or a month.
The notice is a `budget.notice` event (the Home screen lists today's, `approvals.notifications`
tells the owner's phones); its `BudgetNotice` row, keyed by the cap and what it holds, is written
in the same transaction, so a notice is sent once whatever process dies or retries. See
docs/design.md §10.
"""

from __future__ import annotations

from datetime import date

from django.db import IntegrityError, transaction
from django.utils import timezone

from kernel import journal
from kernel.budgets import Ledger
from kernel.models import BudgetNotice

# The share of a cap that earns a notice, as a fraction (4/5: 80 %).
SHARE = (4, 5)
WHAT = {
    "max_usd_micros": "spend",
    "max_tokens": "tokens",
    "max_seconds": "wall time",
}


def near(spent: int, cap: int | None) -> bool:
    """At least 80 % of the cap, not yet all of it (crossing stops the run and says so)."""
    return cap is not None and cap > 0 and spent * SHARE[1] >= cap * SHARE[0] and spent < cap


def notify_once(
    key: str, *, message: str, run_id: int | None = None, account_id: int | None = None
) -> bool:
    """Record the notice `key` and its event, unless it was sent already; True if sent now."""
    try:
        with transaction.atomic():
            BudgetNotice.objects.create(key=key, at=timezone.now(), message=message)
            journal.append_event(
                "budget.notice",
                run_id=run_id,
                account_id=account_id,
                key=key,
                message=message,
            )
    except IntegrityError:
        return False  # sent before, by this execution or another
    return True


def account_near(account_id: int, ledger: Ledger, *, run_id: int) -> list[str]:
    """The notices of a mission's spend and token caps at 80 %, each sent once."""
    sent = []
    for cap, spent in (("max_usd_micros", ledger.usd_micros), ("max_tokens", ledger.tokens)):
        limit = ledger.caps.get(cap)
        if near(spent, limit):
            key = f"account:{account_id}:{cap}"
            message = f"Mission {account_id} has used 80 % of its {WHAT[cap]} cap."
            if notify_once(key, message=message, run_id=run_id, account_id=account_id):
                sent.append(key)
    return sent


def day_near(day: date, spent: int, cap: int) -> bool:
    """The notice of the day's global spend at 80 % of the daily cap, sent once a day."""
    return near(spent, cap) and notify_once(
        f"day:{day.isoformat()}", message="Today's spend has reached 80 % of the daily cap."
    )


def wall_time_near(run_id: int, account_id: int) -> bool:
    """The notice of a root run's wall time at 80 % of its cap, sent once per run."""
    return notify_once(
        f"run:{run_id}:max_seconds",
        message=f"Mission {account_id} has used 80 % of its wall time.",
        run_id=run_id,
        account_id=account_id,
    )


def provider_near(key: str, provider: str, period: str, *, run_id: int) -> bool:
    """The notice of a provider's spend at 80 % of its daily or monthly cap, sent once per
    period (`key` names the provider, the cap and the period's first day)."""
    return notify_once(
        key,
        message=f"Spend on {provider} has reached 80 % of its {period} cap.",
        run_id=run_id,
    )
