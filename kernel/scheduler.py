"""Claiming runs, and the run-state transitions around an execution (fenced where it matters).

A claim is the only place a fence grows. Claims are serialised by a transaction-scoped advisory
lock so the per-account and global caps are exact; they are rare next to steps, which take no
global lock. Times come from the application's clock (one host runs the control plane), so
leases, timers and expiries all follow one clock. `LISTEN/NOTIFY` on `agentos_kernel` is a
doorbell only: workers also poll slowly.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.db import connection, transaction
from django.utils import timezone

from agentos.core import reachability
from kernel import bus, crashpoints, journal, leases, programs, versions
from kernel.exceptions import LeaseLost
from kernel.journal import Fence
from kernel.models import TERMINAL, GlobalBudget, Wait, WaitState

CLAIM_LOCK = 0x6167656E  # "agen": the advisory lock key of claims
CHANNEL = "agentos_kernel"
_TERMINAL = tuple(sorted(TERMINAL))
# The answer of a wait ended because its run was stopped: `{STOPPED_MARK: stop reason}`
# (`approvals.models` reads it; `kernel.runs` re-exports it).
STOPPED_MARK = "run_stopped"


@dataclass(frozen=True)
class Claim:
    fence: Fence
    lease_seconds: float
    # The spend caps per model provider when the run was claimed (`kernel.budgets`).
    provider_caps: dict[str, dict[str, int | None]] = field(default_factory=dict)


# The version filter is a constant fragment of `kernel.versions`: no input is interpolated.
_CANDIDATES = f"""
SELECT r.id, r.account_id, r.program, r.engine_version, r.cancel_requested FROM kernel_run r
WHERE r.status IN ('queued', 'running', 'waiting') AND r.runnable_at <= %(now)s
    AND {versions.CLAIMABLE_SQL} AND NOT r.paused
    AND (r.lease_expires_at IS NULL OR r.lease_expires_at < %(now)s)
ORDER BY r.runnable_at, r.id
LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED
"""  # noqa: S608

_ACTIVE_PER_ACCOUNT = """
SELECT a.id, a.max_concurrent_runs,
    (SELECT count(*) FROM kernel_run r WHERE r.account_id = a.id AND r.lease_expires_at >= %s)
FROM kernel_account a WHERE a.id = ANY(%s)
"""


# While no `GlobalBudget` row is saved, its defaults are in force (`kernel.budgets.global_caps`).
_DEFAULT_GOVERNORS = (GlobalBudget().max_running_runs, GlobalBudget().provider_caps)


def claim_runs(*, worker: str, lease_seconds: float, limit: int = 1) -> list[Claim]:
    """Take up to `limit` runnable runs, oldest first.

    1. Serialise claims (advisory lock), so caps cannot be overshot by two claimers at once. A
       claimer frozen inside this transaction (SIGSTOP, a stalled VM) is disconnected by
       PostgreSQL once idle for its lease, which rolls its claim back and frees the lock: one
       frozen worker cannot stop every other from claiming.
    2. Free the leases of holders provably dead on this machine (`leases.free_dead_holders`), so a
       killed worker's runs are taken over now, not when their leases run out.
    3. Respect the global cap on running runs.
    4. Lock runnable candidates, skipping rows other transactions hold; keep those whose account
       stays under its concurrency cap.
    5. Bump their fences and lease them to `worker`, in the same transaction.
    """
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, true),"
            " pg_advisory_xact_lock(%s)",
            [f"{max(int(lease_seconds * 1000), 1000)}ms", CLAIM_LOCK],
        )
        leases.free_dead_holders(cursor, now=now)
        # The same read brings the provider caps each claimed run's meter checks model calls
        # against (`Meter.check_provider`): no statement of its own on the hot path.
        row = GlobalBudget.objects.values_list("max_running_runs", "provider_caps").first()
        cap, provider_caps = row if row is not None else _DEFAULT_GOVERNORS
        if cap is not None:
            cursor.execute("SELECT count(*) FROM kernel_run WHERE lease_expires_at >= %s", [now])
            (running,) = cursor.fetchone() or (0,)
            limit = min(limit, cap - running)
        if limit <= 0:
            return []
        # Over-fetch a little: some candidates may belong to accounts at their cap.
        cursor.execute(_CANDIDATES, {"now": now, "limit": limit * 4, **versions.claim_params()})
        found = [versions.Candidate(*row) for row in cursor.fetchall()]
        # Recorded by an earlier version nothing here resumes: parked for the owner, now.
        versions.park(cursor, [c for c in found if not c.claimable])
        candidates = [c for c in found if c.claimable]
        if not candidates:
            return []
        cursor.execute(_ACTIVE_PER_ACCOUNT, [now, list({c.account_id for c in candidates})])
        room = {account: cap - active for account, cap, active in cursor.fetchall()}
        chosen: list[versions.Candidate] = []
        for candidate in candidates:
            if len(chosen) < limit and room[candidate.account_id] > 0:
                room[candidate.account_id] -= 1
                chosen.append(candidate)
        if not chosen:
            return []
        upgraded = versions.upgrades(chosen)
        cursor.execute(
            "UPDATE kernel_run SET fence = fence + 1, lease_owner = %s,"
            " lease_expires_at = %s, status = 'running',"
            " wake_pending = false, interrupt_requested = false,"
            " started_at = COALESCE(started_at, %s),"
            " engine_version = CASE WHEN id = ANY(%s) THEN %s ELSE engine_version END,"
            " needs_migration = needs_migration AND NOT id = ANY(%s)"
            " WHERE id = ANY(%s) RETURNING id, fence",
            [
                worker[:200],
                now + timedelta(seconds=lease_seconds),
                now,
                [c.run_id for c in upgraded],
                programs.ENGINE_VERSION,
                [c.run_id for c in upgraded],
                [c.run_id for c in chosen],
            ],
        )
        versions.announce_upgrades(upgraded)
        claims = [
            Claim(
                fence=Fence(run_id=run_id, token=token),
                lease_seconds=lease_seconds,
                provider_caps=dict(provider_caps or {}),
            )
            for run_id, token in cursor.fetchall()
        ]
        for claim in claims:  # mid-transaction: a death here leaves the runs unclaimed
            crashpoints.hit("claim_locked", run=claim.fence.run_id)
    for claim in claims:
        crashpoints.hit("claim_committed", run=claim.fence.run_id)
    return claims


def claim_next_run(*, worker: str, lease_seconds: float) -> Claim | None:
    claims = claim_runs(worker=worker, lease_seconds=lease_seconds, limit=1)
    return claims[0] if claims else None


@dataclass(frozen=True)
class Renewal:
    stop_requested: bool
    stop_reason: str
    interrupt_requested: bool
    pause_requested: bool = False


def renew_lease(fence: Fence, *, lease_seconds: float) -> Renewal:
    """Extend the lease and read the owner's requests. `LeaseLost` if taken over."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET lease_expires_at = %s WHERE id = %s AND fence = %s"
            " RETURNING cancel_requested, stop_reason, interrupt_requested, paused",
            [timezone.now() + timedelta(seconds=lease_seconds), fence.run_id, fence.token],
        )
        row = cursor.fetchone()
    if row is None:
        raise LeaseLost(f"run {fence.run_id}: lease taken over")
    return Renewal(bool(row[0]), str(row[1] or ""), bool(row[2]), bool(row[3]))


def clear_interrupt(fence: Fence) -> None:
    """The interrupted step has ended: the next one runs normally."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET interrupt_requested = false WHERE id = %s AND fence = %s",
            [fence.run_id, fence.token],
        )


def release(fence: Fence) -> None:
    """Give the run back at once (graceful shutdown), instead of letting the lease expire."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET lease_expires_at = NULL, lease_owner = '', runnable_at = %s"
            " WHERE id = %s AND fence = %s AND status = 'running'",
            [timezone.now(), fence.run_id, fence.token],
        )
    ring()


def suspend(fence: Fence, *, runnable_at: datetime | None, reason: str) -> None:
    """Park the run until `runnable_at` (or a wake-up). A wake-up that came meanwhile wins.

    Its duration cap's deadline comes first if it is earlier: a run waiting on an approval
    overnight is claimed when its time is up, and stopped by the claim's `Meter.check`. A root
    run is also claimed when 80 % of its time is up, for that check to tell the owner
    (`kernel.notices`); it then parks again until its deadline.
    """
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET status = 'waiting', lease_owner = '', lease_expires_at = NULL,"
            " runnable_at = CASE WHEN wake_pending OR cancel_requested THEN %(now)s"
            " ELSE LEAST(%(at)s::timestamptz, CASE"
            "  WHEN parent_id IS NULL AND started_at + max_seconds * interval '0.8 second'"
            "   > %(now)s THEN started_at + max_seconds * interval '0.8 second'"
            "  ELSE started_at + max_seconds * interval '1 second' END) END,"
            " wake_pending = false WHERE id = %(run)s AND fence = %(fence)s"
            " RETURNING account_id",
            {"now": now, "at": runnable_at, "run": fence.run_id, "fence": fence.token},
        )
        row = cursor.fetchone()
        if row is None:
            raise LeaseLost(f"run {fence.run_id}: lease taken over")
        journal.append_event(
            "run.waiting",
            run_id=fence.run_id,
            account_id=row[0],
            reason=reason,
            until=runnable_at.isoformat() if runnable_at else None,
        )
    crashpoints.hit("suspend_committed", run=fence.run_id)


def finish(fence: Fence, *, status: str, output: Any = None, error: str = "") -> str:
    """End the run; return the status it ended with.

    A run asked to stop ends with its stop reason whatever its program returned: a cancelled
    run never ends `done`. Its parent, if waiting for it, is woken.
    """
    crashpoints.hit("before_finish", run=fence.run_id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET status = CASE WHEN cancel_requested"
            " THEN COALESCE(NULLIF(stop_reason, ''), 'cancelled') ELSE %s END,"
            " output = %s::jsonb, error = %s, finished_at = %s, lease_owner = '',"
            " lease_expires_at = NULL, runnable_at = NULL, wake_pending = false"
            " WHERE id = %s AND fence = %s RETURNING status, parent_id, account_id",
            [status, json.dumps(output), error[:10000], timezone.now(), fence.run_id, fence.token],
        )
        row = cursor.fetchone()
        if row is None:
            raise LeaseLost(f"run {fence.run_id}: lease taken over")
        final, parent_id, account_id = row
        # A run stopped at its claim (its duration cap came while it waited on an approval)
        # leaves no open wait behind: nobody is asked to answer for a run that has ended.
        closed = Wait.objects.filter(run_id=fence.run_id, state=WaitState.OPEN).update(
            state=WaitState.EXPIRED, answer={STOPPED_MARK: final}, settled_at=timezone.now()
        )
        if closed:
            bus.ring_on_commit("waits")
        journal.append_event(
            "run.finished",
            run_id=fence.run_id,
            account_id=account_id,
            status=final,
            error=error[:500],
        )
        if parent_id is not None:
            wake([parent_id])
    crashpoints.hit("finish_committed", run=fence.run_id)
    return str(final)


def wake(run_ids: list[int]) -> None:
    """Make waiting runs runnable now; flag running ones so their next suspension is void."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET wake_pending = (status <> 'waiting'),"
            " runnable_at = CASE WHEN status = 'waiting' THEN %s ELSE runnable_at END"
            " WHERE id = ANY(%s) AND NOT (status = ANY(%s))",
            [timezone.now(), run_ids, list(_TERMINAL)],
        )
    ring()


def ring() -> None:
    """NOTIFY the workers; inside a transaction it is delivered at commit."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


logger = logging.getLogger(__name__)


class Listener(threading.Thread):
    """LISTENs on `CHANNEL` on a connection of its own and calls `heard(payload)` for each
    notification, and `heard(None)` each time it (re)connects: what was committed while it was
    not listening is to be read then. A notification only says "look again"; a lost connection
    is retried every second."""

    def __init__(
        self, name: str, heard: Callable[[str | None], object], *, timeout: float = 1.0
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.heard = heard
        self.timeout = timeout
        self.stopping = threading.Event()

    def run(self) -> None:
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        backoff = reachability.Backoff()
        while not self.stopping.is_set():
            try:
                with psycopg.connect(**params, autocommit=True) as listener:
                    listener.execute(f"LISTEN {CHANNEL}")
                    backoff.reset()
                    reachability.came_back()
                    self.heard(None)
                    while not self.stopping.is_set():
                        for notify in listener.notifies(timeout=self.timeout, stop_after=1):
                            self.heard(notify.payload)
            except psycopg.Error as error:
                if reachability.is_unreachable(error):
                    reachability.went_away(error, where=self.name)
                else:
                    logger.warning("%s: %s; polling until it is back", self.name, error)
                self.stopping.wait(backoff.next_delay())
        connection.close()
