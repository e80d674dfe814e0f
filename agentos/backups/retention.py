"""Which archives the nightly backup keeps: the newest of each of the last `daily` days that
have one, and the newest of each of the last `weekly` ISO weeks that have one (the newest
archive always). A pure function: `schedule` deletes the rest."""

from __future__ import annotations

from datetime import datetime


def keep(stamps: list[datetime], *, daily: int, weekly: int) -> set[datetime]:
    newest_first = sorted(stamps, reverse=True)
    kept: set[datetime] = set(newest_first[:1])
    days: dict[object, datetime] = {}
    weeks: dict[object, datetime] = {}
    for stamp in newest_first:
        days.setdefault(stamp.date(), stamp)
        weeks.setdefault(stamp.isocalendar()[:2], stamp)
    kept.update(list(days.values())[:daily])
    kept.update(list(weeks.values())[:weekly])
    return kept
