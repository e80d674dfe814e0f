"""Completion and cost per completed task, per domain profile and UTC week (the Costs screen).

Two sources, never mixed. The owner's missions started with a profile, by the week they were
created: completed when a root run ended `done` and none is left unfinished (a mission with
criteria ends `done` only once each passes, `missions.verification`); their cost is every root
run's, subtrees, retries and forks included (`costs.completed_missions`). And the evaluation
tasks `mission_eval` ran (`EvalOutcome`), by the week they were recorded: completed when the
task's oracle passed. Their missions are left out of the first, whatever they said of themselves.

Cost per completed task is what every mission of the row cost, failed ones included, divided by
those completed: what one completed task costs under the profile.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncWeek
from django.utils import timezone

from kernel.models import TERMINAL, RunStatus
from missions.models import EvalOutcome, Mission

WEEKS = 12
NO_PROFILE = ""  # an evaluation run without a profile (the default suite)


@dataclass(frozen=True)
class WeekRow:
    profile: str
    week: date  # its Monday (UTC)
    missions: int
    completed: int
    usd_micros: int

    @property
    def rate(self) -> float:
        return self.completed / self.missions if self.missions else 0.0

    @property
    def per_completed_usd_micros(self) -> int | None:
        """None: nothing completed, so no cost per completed task."""
        return self.usd_micros // self.completed if self.completed else None


@dataclass(frozen=True)
class ProfileReport:
    since: date
    missions: list[WeekRow]  # by profile, newest week first
    evaluations: list[WeekRow]


def report(*, weeks: int = WEEKS) -> ProfileReport:
    today = timezone.now().astimezone(UTC).date()
    since = today - timedelta(days=today.weekday() + 7 * (weeks - 1))
    start = datetime(since.year, since.month, since.day, tzinfo=UTC)
    return ProfileReport(since, missions_by_week(start), evaluations_by_week(start))


def missions_by_week(since: datetime) -> list[WeekRow]:
    roots = Q(runs__parent__isnull=True)
    evaluated = EvalOutcome.objects.filter(mission__isnull=False).values("mission_id")
    found = (
        Mission.objects.filter(profile__isnull=False, created_at__gte=since)
        .exclude(pk__in=evaluated)
        .annotate(
            week=TruncWeek("created_at", tzinfo=UTC),
            done=Count("runs", filter=roots & Q(runs__status=RunStatus.DONE)),
            open=Count("runs", filter=roots & ~Q(runs__status__in=TERMINAL)),
            usd=Sum("runs__usd_micros", filter=roots),
        )
        .values_list("profile__name", "week", "done", "open", "usd")
    )
    totals: dict[tuple[str, date], list[int]] = defaultdict(lambda: [0, 0, 0])
    for name, week, done, unfinished, usd in found:
        row = totals[(name, _day(week))]
        row[0] += 1
        row[1] += int(done > 0 and unfinished == 0)
        row[2] += int(usd or 0)
    return _rows(totals)


def evaluations_by_week(since: datetime) -> list[WeekRow]:
    found = (
        EvalOutcome.objects.filter(recorded_at__gte=since)
        .annotate(week=TruncWeek("recorded_at", tzinfo=UTC))
        .values("profile_name", "week")
        .annotate(
            tasks=Count("id"), passed=Count("id", filter=Q(passed=True)), usd=Sum("usd_micros")
        )
        .values_list("profile_name", "week", "tasks", "passed", "usd")
    )
    totals = {
        (name, _day(week)): [tasks, passed, int(usd or 0)]
        for name, week, tasks, passed, usd in found
    }
    return _rows(totals)


def _rows(totals: dict[tuple[str, date], list[int]]) -> list[WeekRow]:
    ordered = sorted(totals.items(), key=lambda item: (item[0][0], -item[0][1].toordinal()))
    return [
        WeekRow(name, week, missions, completed, usd)
        for (name, week), (missions, completed, usd) in ordered
    ]


def _day(value: Any) -> date:
    return value.astimezone(UTC).date() if isinstance(value, datetime) else value
