"""Spend read from the ledger columns: steps (per day and per model: each step is debited when
its result is recorded, at `finished_at`), runs (per mission: root runs count their subtrees)
and the day counter the daily cap is checked against. Days are UTC days, as the ledger's.

Steps copied into a fork carry no cost (the source run paid for them), so nothing is counted
twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db.models import Count, F, Max, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from kernel import budgets
from kernel.models import TERMINAL, BudgetNotice, DailySpend, Run, RunStatus, Step, StepKind
from missions.models import Mission

WINDOW_DAYS = 30
LEDGER = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "usd_micros")
MODEL_STEPS = (StepKind.MODEL_CALL, StepKind.COMPACTION)


@dataclass(frozen=True)
class Spend:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    usd_micros: int = 0
    calls: int = 0  # model calls (responses and compactions)

    @property
    def uncached_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cached_tokens(self) -> int:
        return self.cache_read_tokens + self.cache_write_tokens

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Spend:
        return cls(
            **{name: int(row.get(name) or 0) for name in LEDGER}, calls=int(row.get("calls") or 0)
        )


def _sums() -> dict[str, Any]:
    return {
        **{name: Sum(name) for name in LEDGER},
        # A fork's copied steps are the source run's calls, counted there (settled "forked").
        "calls": Count("id", filter=Q(kind__in=MODEL_STEPS) & ~Q(settled_by="forked")),
    }


def day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def steps_between(start: datetime, end: datetime | None = None) -> QuerySet[Step]:
    """Steps recorded in [start, end). Only runs alive in the window can hold them: that filter
    lets PostgreSQL reach their steps through the (run, seq) index instead of every step."""
    alive = Run.objects.filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
    if end is not None:
        alive = alive.filter(created_at__lt=end)
    found = Step.objects.filter(run_id__in=alive.values("id"), finished_at__gte=start)
    return found.filter(finished_at__lt=end) if end is not None else found


# --- Home: today ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Today:
    day: date
    spend: Spend
    counted_usd_micros: int | None  # the day counter of the daily cap; None: no row yet
    daily_cap_usd_micros: int | None  # None: no cap
    collected_at: datetime
    mission_cap_usd_micros: int | None = None  # a new mission's spend cap by default; None: none
    mission_cap_tokens: int | None = None  # … its token cap
    mission_cap_seconds: int | None = None  # … its wall-time cap
    # Spend caps per provider ("*": each provider not named), {"day": micros, "month": micros}.
    provider_caps: tuple[tuple[str, dict[str, int | None]], ...] = ()
    notices: tuple[
        str, ...
    ] = ()  # today's "80 % of a cap" notices (`kernel.notices`), newest first


def today() -> Today:
    collected_at = timezone.now()
    day = collected_at.astimezone(UTC).date()
    spend = Spend.of(steps_between(day_start(day)).aggregate(**_sums()))
    counted = DailySpend.objects.filter(day=day).values_list("usd_micros", flat=True).first()
    caps = budgets.global_caps()
    return Today(
        day,
        spend,
        counted,
        caps["daily_usd_micros"],
        collected_at,
        mission_cap_usd_micros=caps["mission_usd_micros"],
        mission_cap_tokens=caps["mission_tokens"],
        mission_cap_seconds=caps["mission_seconds"],
        provider_caps=tuple(sorted(budgets.provider_caps().items(), key=lambda item: item[0])),
        notices=tuple(
            BudgetNotice.objects.filter(at__gte=day_start(day))
            .order_by("-at")
            .values_list("message", flat=True)[:5]
        ),
    )


# --- Costs page -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DayRow:
    day: date
    spend: Spend


@dataclass(frozen=True)
class ModelRow:
    model: str
    spend: Spend


@dataclass(frozen=True)
class MissionRow:
    mission_id: int
    goal: str
    spend: Spend


@dataclass(frozen=True)
class RunRow:
    run_id: int
    mission_id: int
    goal: str
    spend: Spend


@dataclass(frozen=True)
class Completed:
    mission_id: int
    goal: str
    finished_at: datetime
    usd_micros: int
    tokens: int


@dataclass(frozen=True)
class Report:
    since: date
    total: Spend
    days: list[DayRow]  # newest first; days without a recorded step are left out
    models: list[ModelRow]  # costliest first
    missions: list[MissionRow]  # costliest first
    runs: list[RunRow]  # costliest first: what each run's own steps cost (not its sub-runs')
    completed: list[Completed]  # newest first
    completed_average_usd_micros: int | None  # None: no completed mission in the window
    collected_at: datetime


def report(*, days: int = WINDOW_DAYS, limit: int = 50) -> Report:
    collected_at = timezone.now()
    since = collected_at.astimezone(UTC).date() - timedelta(days=days - 1)
    steps = steps_between(day_start(since))
    total = Spend.of(steps.aggregate(**_sums()))
    per_day = [
        DayRow(row["day"], Spend.of(row))
        for row in steps.annotate(day=TruncDate("finished_at", tzinfo=UTC))
        .values("day")
        .annotate(**_sums())
        .order_by("-day")
    ]
    per_model = [
        ModelRow(row["name"], Spend.of(row))
        for row in steps.filter(kind__in=MODEL_STEPS)
        .values("name")
        .annotate(**_sums())
        .order_by("-usd_micros", "name")[:limit]
    ]
    mission_rows = list(
        steps.values(mission_id=F("run__account_id"))
        .annotate(**_sums())
        .order_by("-usd_micros", "-mission_id")[:limit]
    )
    goals = dict(
        Mission.objects.filter(pk__in=[row["mission_id"] for row in mission_rows]).values_list(
            "pk", "goal"
        )
    )
    per_mission = [
        MissionRow(row["mission_id"], goals.get(row["mission_id"], ""), Spend.of(row))
        for row in mission_rows
    ]
    run_rows = list(
        steps.values("run_id", mission_id=F("run__account_id"))
        .annotate(**_sums())
        .order_by("-usd_micros", "-run_id")[:limit]
    )
    goals.update(
        Mission.objects.filter(
            pk__in={row["mission_id"] for row in run_rows} - set(goals)
        ).values_list("pk", "goal")
    )
    per_run = [
        RunRow(row["run_id"], row["mission_id"], goals.get(row["mission_id"], ""), Spend.of(row))
        for row in run_rows
    ]
    # Every completed mission of the window counts in the average, not only those listed.
    completed = completed_missions(since=day_start(since))
    average = sum(item.usd_micros for item in completed) // len(completed) if completed else None
    return Report(
        since,
        total,
        per_day,
        per_model,
        per_mission,
        per_run,
        completed[:limit],
        average,
        collected_at,
    )


def completed_missions(*, since: datetime) -> list[Completed]:
    """Missions that ended `done` since `since`: a root run done and none left unfinished. Their
    whole cost (every root run, failed attempts and forks included) is what the mission cost."""
    roots = Q(runs__parent__isnull=True)
    found = (
        Mission.objects.annotate(
            done=Count("runs", filter=roots & Q(runs__status=RunStatus.DONE)),
            open=Count("runs", filter=roots & ~Q(runs__status__in=TERMINAL)),
            finished_at=Max("runs__finished_at", filter=roots),
            usd_micros=Sum("runs__usd_micros", filter=roots),
            tokens=Sum(
                F("runs__input_tokens")
                + F("runs__output_tokens")
                + F("runs__cache_read_tokens")
                + F("runs__cache_write_tokens"),
                filter=roots,
            ),
        )
        .filter(done__gt=0, open=0, finished_at__gte=since)
        .order_by("-finished_at", "-id")
    )
    return [
        Completed(
            mission_id=mission.pk,
            goal=mission.goal,
            finished_at=mission.finished_at,
            usd_micros=int(mission.usd_micros or 0),
            tokens=int(mission.tokens or 0),
        )
        for mission in found
    ]
