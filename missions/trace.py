"""A run's trace as a waterfall: each journaled step as a bar from its start to its end on the
run's own time line, with what it cost. Read from the journal (steps carry their times), so the
trace of a run that crashed and resumed shows what really happened, replays included."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_safe

from agentos.core.shell import SCREENS_BY_SLUG, owner_required
from kernel.models import Run, Step

MAX_STEPS = 500  # the most recent ones; a page of a phone cannot show more usefully
MIN_WIDTH = 0.4  # percent: a step of a millisecond stays visible


@dataclass(frozen=True)
class Bar:
    step: Step
    offset: float  # percent of the time line before the step started
    width: float  # percent of the time line the step took
    seconds: float | None  # None: still under way
    error: bool


def waterfall(run: Run, steps: list[Step], now: datetime) -> tuple[list[Bar], float]:
    """The bars of `steps` on the time line from the run's start to its end (or now), and that
    time line's length in seconds."""
    if not steps:
        return [], 0.0
    start = min([run.started_at or steps[0].started_at, *(s.started_at for s in steps)])
    end = max(run.finished_at or now, *(s.finished_at or now for s in steps))
    total = max((end - start).total_seconds(), 1e-6)
    bars = []
    for step in steps:
        finished = step.finished_at
        began = (step.started_at - start).total_seconds()
        lasted = ((finished or now) - step.started_at).total_seconds()
        result: Any = step.result
        bars.append(
            Bar(
                step=step,
                offset=round(100 * began / total, 3),
                width=round(max(100 * lasted / total, MIN_WIDTH), 3),
                seconds=lasted if finished else None,
                error=isinstance(result, dict) and bool(result.get("is_error")),
            )
        )
    return bars, total


@require_safe
@owner_required
def run_trace(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("account__mission"), pk=run_id)
    total_steps = Step.objects.filter(run=run).count()
    steps = list(
        Step.objects.filter(run=run)
        .defer("request", "request_hash", "idempotency_key")
        .order_by("-seq")[:MAX_STEPS]
    )[::-1]
    bars, seconds = waterfall(run, steps, timezone.now())
    context = {
        "screen": SCREENS_BY_SLUG["missions"],
        "run": run,
        "bars": bars,
        "seconds": seconds,
        "shown": len(steps),
        "total_steps": total_steps,
        "children": Run.objects.filter(parent=run).order_by("spawned_by_seq", "pk"),
    }
    return render(request, "missions/trace.html", context)
