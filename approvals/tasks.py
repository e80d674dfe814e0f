"""The approvals app's work in every worker process of the huey pool."""

from __future__ import annotations

import threading

from huey.contrib.djhuey import HUEY

from approvals import notifications, push

_push_stopping = threading.Event()


@HUEY.on_startup("push_notifications")  # type: ignore[untyped-decorator]  # huey ships no hints
def start_push_follower() -> None:
    """Each worker process follows the event stream for waits to notify (within a second);
    the state row's lock lets one of them at a time take the next events. Keys are made here
    on the first start, before anyone subscribes."""
    push.state()
    threading.Thread(
        target=notifications.follow_until, args=(_push_stopping,), name="push", daemon=True
    ).start()


@HUEY.on_shutdown("push_notifications")  # type: ignore[untyped-decorator]
def stop_push_follower() -> None:
    _push_stopping.set()
