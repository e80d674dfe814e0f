"""The worker pool's heartbeats and the state derived from them.

Every worker process beats on its own thread every `WORKER_BEAT_SECONDS` (`beat_until`), under a
name that lets a process of the same machine prove its death (`kernel.holders`). A worker is
live while its last beat is younger than `MISSED_BEATS` intervals and its process is not
provably gone; a graceful stop forgets its row at once. Health (`agentos.health`) counts these.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from agentos.core import reachability
from kernel import bus, holders
from kernel.models import WorkerBeat

logger = logging.getLogger(__name__)

PoolState = Literal["up", "stale", "unknown"]
# A worker that missed this many beats in a row is not live (one late beat is a slow query).
MISSED_BEATS = 3


def worker_name() -> str:
    # The lease holder's name where /proc tells: a beat of a killed process is then provably
    # dead at once, instead of counting until it goes stale.
    here = holders.this_process()
    return here.name if here is not None else f"{socket.gethostname()}:{os.getpid()}"


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


def beat_one(*, worker: str | None = None) -> bool:
    """One beat; False when the database did not take it (the next beat tries again)."""
    try:
        record_beat(worker=worker)
    except Exception as error:
        connection.close()  # a broken connection is not reused by the next beat
        if reachability.is_unreachable(error):
            reachability.went_away(error, where="heartbeat")
        else:
            logger.exception("heartbeat failed")
        return False
    reachability.came_back()
    return True


def beat_until(stopping: threading.Event, *, worker: str | None = None) -> None:
    """This process's beat: one every `WORKER_BEAT_SECONDS` until `stopping` is set."""
    while not stopping.wait(settings.WORKER_BEAT_SECONDS):
        beat_one(worker=worker)


def forget(*, worker: str | None = None) -> None:
    """A worker stopping gracefully is not live from now on, whatever its last beat says."""
    WorkerBeat.objects.filter(worker=worker or worker_name()).delete()
    bus.ring_on_commit("health")


def live_after(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.WORKER_BEAT_SECONDS * MISSED_BEATS)


@dataclass(frozen=True)
class PoolStatus:
    state: PoolState
    last_beat_at: datetime | None
    live_workers: int
    checked_at: datetime


def pool_status() -> PoolStatus:
    """`up` when some worker is live, `stale` if beats stopped, else unknown; `live_workers`
    counts the processes with a recent beat that are not provably gone."""
    now = timezone.now()
    last = WorkerBeat.objects.order_by("-beat_at").values_list("beat_at", flat=True).first()
    if last is None:
        return PoolStatus(state="unknown", last_beat_at=None, live_workers=0, checked_at=now)
    recent = WorkerBeat.objects.filter(beat_at__gte=live_after(now))
    live = sum(1 for name in recent.values_list("worker", flat=True) if not _gone(name))
    return PoolStatus(
        state="up" if live else "stale", last_beat_at=last, live_workers=live, checked_at=now
    )


def _gone(name: str) -> bool:
    holder = holders.parse(name)
    return holder is not None and holders.gone(holder)


def prune_beats(*, older_than: timedelta = timedelta(days=1)) -> int:
    """Forget processes that have been silent for long: each restart adds a row."""
    deleted, _ = WorkerBeat.objects.filter(beat_at__lt=timezone.now() - older_than).delete()
    return deleted
