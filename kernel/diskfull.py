"""A full disk is a durable wait, not a failure (docs/design.md §7).

A step whose execution met a full disk (ENOSPC on a file it wrote, or PostgreSQL's 53100
`could not extend file`) did not fail for a reason of its own: it holds a durable timer
(`kernel.waits.hold_step`) and the run suspends, its worker free, until the timer is due. Its
intent stays without a result, so the claim that follows executes it again exactly as after a
crash: a read, a model call or an idempotent write runs again, a non-idempotent step asks its
probe or the owner whether it happened (`RunContext._reconcile`), never retried blindly. Each
hold waits longer (doubling from `KERNEL_DISK_FULL_RETRY_SECONDS`, jittered, at most 15 min);
after `DISK_FULL_HOURS` the step fails, saying so.

When the database's own disk is full, even the hold cannot be written: the attempt ends like a
crash (nothing of it committed) and the run's lease expiring is the wait (`kernel.execution`).
"""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import NoReturn

from django.conf import settings
from django.utils import timezone

from kernel import waits
from kernel.exceptions import StepFailed, Suspend

logger = logging.getLogger(__name__)

DISK_FULL_HOURS = 24
MAX_WAIT_SECONDS = 15 * 60.0
_RANDOM = secrets.SystemRandom()


def hold(run_id: int, seq: int, error: BaseException) -> NoReturn:
    """Hold step `seq` of run `run_id` until a later try (raises `Suspend`), or fail it once
    the disk has been full for `DISK_FULL_HOURS` (raises `StepFailed`)."""
    now = timezone.now()
    held = waits.step_hold(run_id, seq)
    since = held.created_at if held is not None else now
    previous = held.question.get("disk_full") if held is not None else None
    holds = int(previous.get("holds", 0)) if isinstance(previous, dict) else 0
    said = _describe(error)
    if now - since >= timedelta(hours=DISK_FULL_HOURS):
        waits.release_step(run_id, seq)
        raise StepFailed(f"the disk was full for {DISK_FULL_HOURS} h: {said}")
    due = now + timedelta(seconds=delay_seconds(holds))
    question = {"disk_full": {"holds": holds + 1, "error": said, "until": due.isoformat()}}
    waits.hold_step(run_id, seq, question, due_at=due)
    logger.warning("run %s step %s: the disk is full (%s); retried at %s", run_id, seq, said, due)
    raise Suspend(due, f"the disk is full: step {seq} is tried again at {due:%H:%M:%S} UTC")


def delay_seconds(holds: int) -> float:
    """Doubling from `KERNEL_DISK_FULL_RETRY_SECONDS`, drawn between half and all of it so that
    the runs one full disk held do not all come back at once."""
    base = min(settings.KERNEL_DISK_FULL_RETRY_SECONDS * 2.0**holds, MAX_WAIT_SECONDS)
    return _RANDOM.uniform(base / 2, base)


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:300]
