"""Periodic work of the agentos app (huey worker pool): thin wrappers around services."""

from __future__ import annotations

import threading

from huey import crontab
from huey.contrib.djhuey import HUEY, db_periodic_task

from agentos import idempotency, push

_push_stopping = threading.Event()


@db_periodic_task(crontab(minute="23", hour="*"))  # type: ignore[untyped-decorator]
def prune_idempotency_keys() -> None:
    """Forget Idempotency-Keys older than a day (hourly: a day is the promise, not a bound)."""
    idempotency.prune()


@HUEY.on_startup("push_notifications")  # type: ignore[untyped-decorator]  # huey ships no hints
def start_push_follower() -> None:
    """Each worker process follows the event stream for waits to notify (within a second);
    the state row's lock lets one of them at a time take the next events. Keys are made here
    on the first start, before anyone subscribes."""
    push.state()
    threading.Thread(
        target=push.follow_until, args=(_push_stopping,), name="push", daemon=True
    ).start()


@HUEY.on_shutdown("push_notifications")  # type: ignore[untyped-decorator]
def stop_push_follower() -> None:
    _push_stopping.set()
