"""Effects fenced by the run's lease: the storage checks the token (Kleppmann's fencing).

The journal refuses a zombie's writes, but an effect outside the journal is only as safe as the
place it lands: a worker paused past its lease (GC, SIGSTOP, a slow disk) can wake up in the middle
of an effect after another worker took the run over. Where the effect's storage can check the
token — our own database, or a service that accepts one — do the effect inside `fenced(...)`.
Effects that cannot check a token rely on reconciliation (probe, owner) and on the short window
between the last lease check and the effect.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.conf import settings
from django.db import connection, transaction

from kernel.exceptions import LeaseLost
from kernel.journal import Fence


@contextlib.contextmanager
def fenced(fence: Fence, *, hold_seconds: float | None = None) -> Iterator[None]:
    """A transaction that commits only while `fence` still owns the run.

    1. Lock the run row FOR SHARE if its fence is still ours: a takeover (which bumps the fence)
       waits until this transaction ends, so it sees the effect, or none of it.
    2. Bound the lock: a worker frozen inside the transaction is disconnected by PostgreSQL after
       `hold_seconds` idle, rolling its effect back, so a frozen worker cannot pin the run.
    """
    hold = hold_seconds if hold_seconds is not None else settings.KERNEL_LEASE_SECONDS
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
            [f"{int(hold * 1000)}ms"],
        )
        cursor.execute(
            "SELECT 1 FROM kernel_run WHERE id = %s AND fence = %s FOR SHARE",
            [fence.run_id, fence.token],
        )
        if cursor.fetchone() is None:
            raise LeaseLost(f"run {fence.run_id}: fence {fence.token} is stale; effect refused")
        yield
