"""huey tasks and hooks of the kernel: thin wrappers around kernel services.

Each huey worker process also runs the kernel loop (`kernel.worker`) in a thread, started when
the process starts and stopped when it shuts down; the process's main thread keeps serving
huey's periodic tasks.
"""

from __future__ import annotations

import contextlib
import threading

from django.db import DatabaseError, close_old_connections
from huey import crontab
from huey.contrib.djhuey import HUEY, db_periodic_task

from agentos.core import reachability
from kernel import heartbeats, partitions
from kernel.worker import Worker

_kernel_loop: Worker | None = None
_beating = threading.Event()


@HUEY.on_startup()  # type: ignore[untyped-decorator]  # huey ships no type hints
def start_worker() -> None:
    """Report at once, then start this process's heartbeat and kernel loop."""
    global _kernel_loop
    close_old_connections()
    # A worker started while the database is away still starts its loops: they wait for it.
    try:
        heartbeats.record_beat(started=True)
    except DatabaseError as error:
        if not reachability.is_unreachable(error):
            raise
        reachability.went_away(error, where="worker start")
        close_old_connections()
    # Each process beats for itself: the periodic task below runs on one worker only, so it
    # alone would show one worker live however many run.
    threading.Thread(
        target=heartbeats.beat_until, args=(_beating,), name="heartbeat", daemon=True
    ).start()
    _kernel_loop = Worker()
    threading.Thread(target=_kernel_loop.run_forever, name="kernel-loop", daemon=True).start()


@HUEY.on_shutdown()  # type: ignore[untyped-decorator]  # huey ships no type hints
def stop_worker() -> None:
    _beating.set()
    if _kernel_loop is not None:
        _kernel_loop.stopping.set()
    # Not live from now on; a database away at shutdown leaves the beat to go stale instead.
    with contextlib.suppress(DatabaseError):
        heartbeats.forget()


@db_periodic_task(crontab(minute="*"))  # type: ignore[untyped-decorator]  # huey ships no hints
def heartbeat() -> None:
    """Runs through the queue, so a beat proves both the scheduler and a worker are alive."""
    heartbeats.record_beat()
    heartbeats.prune_beats()


@db_periodic_task(crontab(minute="7", hour="*"))  # type: ignore[untyped-decorator]
def create_event_partitions() -> None:
    """Monthly partitions of the event log exist months ahead (hourly: cheap and idempotent)."""
    partitions.ensure_partitions()
