"""Cron expressions: the one parser the schedules, their model's validation and the API share.
A leaf module: it imports nothing of the project, so the models can use it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from huey import crontab


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
        matcher: Callable[[datetime], bool] = crontab(minute, hour, day, month, weekday)
    except ValueError as error:
        raise ValueError(f"Invalid cron expression {expression!r}: {error}.") from error
    return matcher
