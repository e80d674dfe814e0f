"""Effects fenced by the run's lease: the storage checks the token (Kleppmann's fencing).

The journal refuses a zombie's writes, but an effect outside the journal is only as safe as the
place it lands: a worker paused past its lease (GC, SIGSTOP, a slow disk) can wake up in the middle
of an effect after another worker took the run over. Where the effect's storage can check the
token — our own database, or a service that accepts one — do the effect inside `fenced(...)`.
Effects that cannot check a token rely on reconciliation (probe, owner) and on the short window
between the last lease check and the effect.

A lease whose holder process is provably gone (`kernel.holders`) is freed by the next claim
(`free_dead_holders`): a killed worker's runs resume at once, not when their leases run out.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from kernel import holders, journal
from kernel.exceptions import LeaseLost
from kernel.journal import Fence

logger = logging.getLogger(__name__)


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


_LOCAL_HOLDERS = """
SELECT DISTINCT lease_owner FROM kernel_run
WHERE status = 'running' AND lease_expires_at >= %s AND lease_owner LIKE %s ESCAPE '\\'
"""


def local_holders(
    cursor: CursorWrapper | None = None, *, now: datetime | None = None
) -> list[holders.Holder]:
    """The holders of live leases that run on this machine (whose death we could prove)."""
    here = holders.this_process()
    if here is None:
        return []
    prefix = here.host.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ":%"
    with contextlib.ExitStack() as stack:
        if cursor is None:
            cursor = stack.enter_context(connection.cursor())
        cursor.execute(_LOCAL_HOLDERS, [now or timezone.now(), prefix])
        names = [name for (name,) in cursor.fetchall()]
    found = [holders.parse(name) for name in names]
    return [holder for holder in found if holder is not None and holders.is_local(holder)]


def free_dead_holders(cursor: CursorWrapper, *, now: datetime) -> list[int]:
    """Release the leases whose holder process is provably gone (see `kernel.holders`); return
    the runs freed. Called under the claim lock. The fence is not bumped here: the claim that
    takes a run over does it, and a holder judged dead by mistake would still be fenced out."""
    dead = [holder.name for holder in local_holders(cursor, now=now) if holders.gone(holder)]
    if not dead:
        return []
    cursor.execute(
        "UPDATE kernel_run SET lease_owner = '', lease_expires_at = NULL, runnable_at = %s"
        " WHERE status = 'running' AND lease_owner = ANY(%s) AND lease_expires_at >= %s"
        " RETURNING id, account_id",
        [now, dead, now],
    )
    freed = cursor.fetchall()
    for run_id, account_id in freed:
        journal.append_event(
            "run.lease_freed", run_id=run_id, account_id=account_id, reason="holder died"
        )
    if freed:
        logger.warning("freed the leases of %d run(s) of dead worker(s) %s", len(freed), dead)
    return [run_id for run_id, _account in freed]
