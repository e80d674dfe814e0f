"""The meter of one execution of a run: counts its turns and tool calls, bills them to the
ledger, and stops the run at the first budget cap crossed (its own, an ancestor's, its
account's, the day's).

`RunContext` holds one `Meter` per execution and calls it around every step; the ledger itself
(the debit statements) is `kernel.journal`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from kernel import budgets, journal, notices, runs
from kernel.budgets import CAP_FIELDS, Ledger, global_caps
from kernel.debits import Debit
from kernel.exceptions import Stop
from kernel.journal import Fence, Record
from kernel.models import Run, RunStatus, StepKind

# How long what a provider spent is trusted before it is read again (`Meter.check_provider`).
PROVIDER_SPENT_SECONDS = 30.0


@dataclass
class Meter:
    """What this execution has counted but not billed yet, and the first cap it saw crossed.

    Counters of free steps wait for the next costly step's debit (or the end of the execution):
    one ledger write per costly step instead of one per step.
    """

    run: Run
    over_budget: str = ""  # the first cap a debit crossed: the run stops before its next step
    unbilled_turns: int = 0
    unbilled_tool_calls: int = 0
    billed_through: int = 0  # set from the run when the execution starts
    daily_cap: int | None = None  # read at the first debit of this execution
    # Whether any run of the tree (this one, its ancestors) has a cap: None until known. Caps
    # are set when a run is created; an ancestor's are learnt from the first debit's totals.
    # Without any, debits need not return the runs' totals (`journal.record_result`).
    tree_capped: bool | None = None
    # The 80 % notices this execution sent or found sent (`kernel.notices`): asked once each.
    noticed: set[str] = field(default_factory=set)
    provider_caps: dict[str, dict[str, int | None]] | None = None  # read at the first model call
    # What each capped provider spent since a period's start, and when that was read.
    provider_spent: dict[tuple[str, datetime], tuple[datetime, int]] = field(default_factory=dict)
    calling: str | None = None  # the capped provider of the model call under way

    def __post_init__(self) -> None:
        self.billed_through = self.run.billed_through
        if not self.run.ancestors:
            self.tree_capped = any(getattr(self.run, cap) is not None for cap in CAP_FIELDS)

    def count(self, kind: str) -> None:
        if kind == StepKind.MODEL_CALL:
            self.unbilled_turns += 1
        elif kind == StepKind.TOOL_CALL:
            self.unbilled_tool_calls += 1

    def count_replayed(self, record: Record) -> None:
        """A recorded result, counted again if the ledger has not counted it yet."""
        if record.seq > self.billed_through:
            self.count(record.kind)

    def billed(self, seq: int) -> None:
        """A debit carried the counters, up to step `seq` included."""
        self.unbilled_turns = self.unbilled_tool_calls = 0
        self.billed_through = seq

    def bill(self, fence: Fence, records: dict[int, Record]) -> None:
        """Put the free steps' counters in the ledger, when the execution ends or parks. The
        caller writes any held-back result first: counters never cover a step without its
        result."""
        if self.unbilled_turns or self.unbilled_tool_calls:
            last = max(seq for seq, record in records.items() if record.finished)
            journal.bill_counters(
                fence,
                seq=last,
                turns=self.unbilled_turns,
                tool_calls=self.unbilled_tool_calls,
                debit_ids=[*self.run.ancestors, self.run.pk],
            )
            self.billed(last)

    def check(self) -> None:
        """Stop before the next step if the run is out of time or a cap was crossed."""
        limit = self.run.max_seconds
        started = self.run.started_at
        if limit is not None and started:
            elapsed = timezone.now() - started
            if elapsed >= timedelta(seconds=limit):
                raise Stop(RunStatus.BUDGET_EXHAUSTED, f"max_seconds {limit} reached")
            # A mission's wall time is its root run's: the owner hears at 80 %, once.
            if (
                not self.run.ancestors
                and "wall" not in self.noticed
                and notices.near(int(elapsed.total_seconds()), limit)
            ):
                self.noticed.add("wall")
                notices.wall_time_near(self.run.pk, self.run.account_id)
        if self.over_budget:
            raise Stop(RunStatus.BUDGET_EXHAUSTED, self.over_budget)

    def check_provider(self, request: object) -> None:
        """Before a model call: refuse it if its provider's spend today or this month (UTC)
        reached its cap, and tell the owner once at 80 %. What a provider spent is read again
        after `PROVIDER_SPENT_SECONDS`, not before every call: runs in parallel may overshoot
        a provider's cap by what they spend in that time."""
        if self.provider_caps is None:
            self.provider_caps = budgets.provider_caps()  # once per execution, as the daily cap
        provider = request.get("provider") if isinstance(request, dict) else None
        if not isinstance(provider, str):
            return
        caps = budgets.caps_of(self.provider_caps, provider)
        self.calling = None
        if all(caps.get(key) is None for key in budgets.PERIODS):
            return
        now = timezone.now().astimezone(UTC)
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        for period, key, since in (("daily", "day", day), ("monthly", "month", day.replace(day=1))):
            cap = caps.get(key)
            if cap is None:
                continue
            spent = self._provider_spent(provider, since, now)
            if spent >= cap:
                raise Stop(
                    RunStatus.BUDGET_EXHAUSTED,
                    f"the {period} spend cap of provider {provider} is reached"
                    f" ({spent} of {cap} micro-dollars since {since.date().isoformat()} UTC)",
                )
            notice = f"provider:{provider}:{key}:{since.date().isoformat()}"
            if notice not in self.noticed and notices.near(spent, cap):
                self.noticed.add(notice)
                notices.provider_near(notice, provider, period, run_id=self.run.pk)
        self.calling = provider

    def provider_paid(self, usd_micros: int) -> None:
        """The model call under way cost this: added to what its provider spent as last read."""
        if self.calling is None or usd_micros <= 0:
            return
        for (provider, since), (read_at, spent) in list(self.provider_spent.items()):
            if provider == self.calling:
                self.provider_spent[(provider, since)] = (read_at, spent + usd_micros)

    def _provider_spent(self, provider: str, since: datetime, now: datetime) -> int:
        read = self.provider_spent.get((provider, since))
        if read is None or (now - read[0]).total_seconds() >= PROVIDER_SPENT_SECONDS:
            read = (now, budgets.provider_spent(provider, since))
            self.provider_spent[(provider, since)] = read
        return read[1]

    def check_counters(self) -> None:
        """This run's own turn and tool-call caps, exactly, from what it knows it has done."""
        for cap, spent, unbilled in (
            ("max_turns", self.run.turns, self.unbilled_turns),
            ("max_tool_calls", self.run.tool_calls, self.unbilled_tool_calls),
        ):
            limit = getattr(self.run, cap)
            if limit is not None and spent + unbilled >= limit and not self.over_budget:
                self.over_budget = f"run {self.run.pk} reached {cap}"

    def check_debit(self, debit: Debit) -> None:
        """After a debit, note the first cap crossed (own, ancestor, account or day)."""
        if self.tree_capped is None and debit.runs:
            self.tree_capped = any(
                cap is not None for ledger in debit.runs.values() for cap in ledger.caps.values()
            )
        run_id = self.run.pk
        mine = debit.runs.get(run_id)
        if mine is not None and (cap := mine.crossed()):
            self.over_budget = f"run {run_id} reached {cap}"
            return
        for ancestor in self.run.ancestors:
            ledger = debit.runs.get(ancestor)
            if ledger is not None and (cap := ledger.crossed()):
                # The whole subtree of that ancestor stops, this run included.
                runs.request_stop(ancestor, reason=RunStatus.BUDGET_EXHAUSTED, by="kernel")
                self.over_budget = f"ancestor run {ancestor} reached {cap}"
                return
        if debit.account is not None and (cap := debit.account.crossed()):
            runs.stop_account(self.run.account_id, reason=RunStatus.BUDGET_EXHAUSTED)
            self.over_budget = f"account {self.run.account_id} reached {cap}"
            return
        if debit.account is not None:
            self._notice_account(debit.account)
        if self.daily_cap is None:
            self.daily_cap = _daily_cap()  # once per execution: caps edits apply at next claim
        daily_cap = self.daily_cap or None
        spent_today = debit.day_usd_micros
        if daily_cap is not None and spent_today is not None and spent_today >= daily_cap:
            self.over_budget = "the global daily spend cap is reached"
        elif daily_cap is not None and spent_today is not None:
            self._notice_day(spent_today, daily_cap)

    def _notice_account(self, ledger: Ledger) -> None:
        """Tell the owner once when the mission's spend or tokens reach 80 % of its caps."""
        near = [
            cap
            for cap, spent in (("max_usd_micros", ledger.usd_micros), ("max_tokens", ledger.tokens))
            if notices.near(spent, ledger.caps.get(cap)) and cap not in self.noticed
        ]
        if near:
            self.noticed.update(near)
            notices.account_near(self.run.account_id, ledger, run_id=self.run.pk)

    def _notice_day(self, spent: int, cap: int) -> None:
        day = timezone.now().astimezone(UTC).date()
        key = f"day:{day.isoformat()}"
        if key not in self.noticed and notices.near(spent, cap):
            self.noticed.add(key)
            notices.day_near(day, spent, cap)


def _daily_cap() -> int:
    """The global daily cap in micro-dollars (the default while no row is saved); 0 when there
    is none."""
    return global_caps()["daily_usd_micros"] or 0
