"""The worker pool's heartbeats and the state derived from them."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from kernel import bus
from kernel.models import WorkerBeat

PoolState = Literal["up", "stale", "unknown"]


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def record_beat(*, worker: str | None = None, started: bool = False) -> WorkerBeat:
    """Record that this worker process is alive; `started` marks a fresh process."""
    name = worker or worker_name()
    now = timezone.now()
    with transaction.atomic():
        beat, created = WorkerBeat.objects.get_or_create(
            worker=name, defaults={"started_at": now, "beat_at": now, "beats": 1}
        )
        if not created:
            WorkerBeat.objects.filter(pk=beat.pk).update(
                beat_at=now,
                beats=F("beats") + 1,
                **({"started_at": now} if started else {}),
            )
            beat.refresh_from_db()
        bus.ring_on_commit("health")
    return beat


@dataclass(frozen=True)
class PoolStatus:
    state: PoolState
    last_beat_at: datetime | None
    live_workers: int
    checked_at: datetime


def pool_status() -> PoolStatus:
    """`up` when some worker beat within the stale limit, `stale` if beats stopped, else unknown."""
    now = timezone.now()
    last = WorkerBeat.objects.order_by("-beat_at").values_list("beat_at", flat=True).first()
    if last is None:
        return PoolStatus(state="unknown", last_beat_at=None, live_workers=0, checked_at=now)
    fresh_since = now - timedelta(seconds=settings.WORKER_STALE_AFTER_SECONDS)
    live = WorkerBeat.objects.filter(beat_at__gte=fresh_since).count()
    return PoolStatus(
        state="up" if live else "stale", last_beat_at=last, live_workers=live, checked_at=now
    )


def prune_beats(*, older_than: timedelta = timedelta(days=1)) -> int:
    """Forget processes that have been silent for long: each restart adds a row."""
    deleted, _ = WorkerBeat.objects.filter(beat_at__lt=timezone.now() - older_than).delete()
    return deleted
