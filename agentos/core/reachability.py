"""Whether the database answers, as the processes that need it see it.

Every loop that talks to PostgreSQL (the kernel loop, its doorbell, the heartbeat, the huey
queue, lease keepers) asks `is_unreachable(error)` when a query fails. An unreachable database is
an outage, not a bug: the loop says so through `went_away` (one line per process, not one per
attempt), waits a `Backoff` delay (exponential with jitter, capped), tries again, and calls
`came_back` on its first success (one line again). A full disk (`is_disk_full`) is told apart:
the server answers, it just cannot write.
"""

from __future__ import annotations

import errno
import logging
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import utils as django_db

logger = logging.getLogger("agentos.database")

# SQLSTATEs of a server that is gone, going or not yet back: connection exceptions (class 08),
# shutdown and recovery (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now),
# and a server that takes no more connections (53300). Not 57014 (a statement timeout): the
# server is up.
UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})
DISK_FULL_STATE = "53100"
# Errors that leave no SQLSTATE because no server answered (refused, reset, closed connection).
_NO_ANSWER_TYPES = ("OperationalError", "InterfaceError")


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error and what it wraps: Django wraps psycopg (`__cause__`), peewee (huey's queue)
    passes the original as its first argument."""
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        todo.extend(arg for arg in current.args[:1] if isinstance(arg, BaseException))


def _sqlstate(error: BaseException) -> str | None:
    state = getattr(error, "sqlstate", None)
    return state if isinstance(state, str) else None


def is_unreachable(error: BaseException) -> bool:
    """True when `error` means no server answered (down, restarting, refusing connections)."""
    if is_disk_full(error):
        return False
    states = [state for e in _chain(error) if (state := _sqlstate(e)) is not None]
    if states:
        return any(state.startswith("08") or state in UNREACHABLE_STATES for state in states)
    if isinstance(error, django_db.OperationalError | django_db.InterfaceError):
        return True
    # psycopg's and peewee's own classes, by name: peewee is imported only by the queue.
    return any(type(e).__name__ in _NO_ANSWER_TYPES for e in _chain(error))


def is_disk_full(error: BaseException) -> bool:
    """True when the server (SQLSTATE 53100) or this machine (ENOSPC, EDQUOT) is out of space."""
    for e in _chain(error):
        if _sqlstate(e) == DISK_FULL_STATE:
            return True
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
    return False


@dataclass
class Backoff:
    """Delays between attempts: `first`, doubling up to `cap`, each drawn in [half, full] so
    that the processes of a pool do not all knock at the same instant when the server returns."""

    first: float = 0.5
    cap: float = 30.0
    attempts: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_delay(self) -> float:
        full = min(self.cap, self.first * 2**self.attempts)
        self.attempts += 1
        return self.rng.uniform(full / 2, full)

    def reset(self) -> None:
        self.attempts = 0


# Process-wide: the kernel loop, the doorbell and the heartbeat of one process share one line
# each way.
_lock = threading.Lock()
_down_since: float | None = None


def went_away(error: BaseException, *, where: str) -> None:
    """Note that the database did not answer; the first failure of an outage logs one line."""
    global _down_since
    with _lock:
        if _down_since is not None:
            return
        _down_since = time.monotonic()
    logger.warning(
        "The database is unreachable (%s: %s); waiting for it to return",
        where,
        str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__,
    )


def came_back() -> None:
    """Note a query that succeeded; the first after an outage logs one line."""
    global _down_since
    if _down_since is None:  # the common case, without the lock
        return
    with _lock:
        since, _down_since = _down_since, None
    if since is not None:
        logger.warning(
            "The database is reachable again after %.1f s; resuming", time.monotonic() - since
        )


def is_down() -> bool:
    return _down_since is not None
