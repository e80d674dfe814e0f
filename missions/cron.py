"""Cron expressions and time zones: the one parser the schedules, their model's validation, the
API and the console share. A leaf module: it imports nothing of the project, so the models can
use it.

A schedule's expression is read in its own time zone: each matching wall-clock time there is due
once (`_instant` says which instant when daylight saving repeats or skips it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from huey import crontab

# Every zone's offset changes by less than this at once: the margin around a search's window.
SHIFT = timedelta(hours=3)


def parse_cron(expression: str) -> Callable[[datetime], bool]:
    """A matcher for a five-field cron expression; ValueError with the reason otherwise."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"A cron expression has five fields (minute hour day month weekday), not"
            f" {len(fields)}: {expression!r}."
        )
    minute, hour, day, month, weekday = fields
    try:
        # strict: a piece it does not understand is an error, not silently ignored.
        matcher: Callable[[datetime], bool] = crontab(
            minute, hour, day, month, weekday, strict=True
        )
    except ValueError as error:
        raise ValueError(f"Invalid cron expression {expression!r}: {error}.") from error
    return matcher


def zone(name: str) -> ZoneInfo:
    """The IANA time zone of that name; ValueError saying so otherwise."""
    # available_timezones() refuses what ZoneInfo would accept but is no zone name ("UTC/..").
    if not isinstance(name, str) or name not in available_zones():
        raise ValueError(
            f"Unknown time zone {name!r}: give an IANA name such as Europe/Paris or UTC."
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(f"Unknown time zone {name!r}.") from error


@functools.cache
def available_zones() -> frozenset[str]:
    return frozenset(available_timezones())  # reads the zone database: once per process


@dataclass(frozen=True)
class _Fields:
    minutes: list[int]
    hours: list[int]
    day_matches: Callable[[datetime], bool]


def _fields(expression: str) -> _Fields:
    # The same matcher, asked one field at a time: a day is checked once, not each minute.
    parse_cron(expression)
    minute, hour, day, month, weekday = expression.split()
    by_minute = crontab(minute, "*", "*", "*", "*", strict=True)
    by_hour = crontab("*", hour, "*", "*", "*", strict=True)
    start = datetime(2000, 1, 1)  # noqa: DTZ001  # a wall-clock time, no instant
    return _Fields(
        minutes=[m for m in range(60) if by_minute(start.replace(minute=m))],
        hours=[h for h in range(24) if by_hour(start.replace(hour=h))],
        day_matches=crontab("*", "*", day, month, weekday, strict=True),
    )


def _instant(local: datetime, where: ZoneInfo) -> datetime:
    """The instant (UTC) of the wall-clock time `local` (naive) in `where`: in a repeated hour,
    its first; in a skipped one, as the offset before the change says (02:30 in a gap from
    02:00 to 03:00 is 03:30), so a daily job is neither run twice nor lost that day."""
    return local.replace(tzinfo=where, fold=0).astimezone(UTC)


def due_times(
    expression: str, where: ZoneInfo, *, after: datetime, until: datetime
) -> Iterator[datetime]:
    """The instants (UTC, in order) after `after` and up to `until` at which the expression is
    due in the time zone `where`; ValueError for an invalid expression."""
    fields = _fields(expression)
    low = (after.astimezone(where) - SHIFT).replace(tzinfo=None)
    high = (until.astimezone(where) + SHIFT).replace(tzinfo=None)
    day: date = low.date()
    while day <= high.date():
        midnight = datetime.combine(day, time())
        if fields.day_matches(midnight):
            found: set[datetime] = set()
            for hour in fields.hours:
                for minute in fields.minutes:
                    local = midnight.replace(hour=hour, minute=minute)
                    if low <= local <= high:
                        found.add(_instant(local, where))
            yield from (t for t in sorted(found) if after < t <= until)
        day += timedelta(days=1)


# How far ahead the next times are looked for: a cron matching only 29 February still has one.
HORIZON = timedelta(days=5 * 366)


def next_times(
    expression: str, where: ZoneInfo, *, now: datetime, count: int = 5
) -> list[datetime]:
    """The next `count` due times after `now`, in the time zone `where`; fewer (none: never)
    when the expression matches nothing within five years."""
    times = due_times(expression, where, after=now, until=now + HORIZON)
    return [t.astimezone(where) for t, _n in zip(times, range(count), strict=False)]
