"""Executing one claimed run: replay its journal through its program, under a renewed lease."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

from agentos.core import reachability
from kernel import crashpoints, journal, programs, runs, scheduler
from kernel.context import RunContext
from kernel.exceptions import JournalMismatch, LeaseLost, Stop, Suspend
from kernel.models import Run, RunStatus
from kernel.scheduler import Claim

logger = logging.getLogger(__name__)

# What `execute` returns when the database went away under the run: its worker gives the lease
# back once the database returns (`Worker._give_back`), and the run resumes from its journal, a
# step whose result was not committed retried from its intent as after a crash.
CUT_SHORT = "database_unreachable"


class LeaseKeeper(threading.Thread):
    """Renews the lease every third of its length, and at once when poked (the owner steered
    the run: `poke`); relays stop, interrupt and pause requests to the running step, and stops
    it when the run's duration cap passes (woken for that moment)."""

    def __init__(self, claim: Claim, context: RunContext) -> None:
        super().__init__(name=f"lease-{claim.fence.run_id}", daemon=True)
        self.claim = claim
        self.context = context
        self.done = False
        self.wake = threading.Event()

    def stop(self) -> None:
        self.done = True
        self.wake.set()
        self.join()

    def run(self) -> None:
        try:
            while True:
                due = self._due()
                pause = self.claim.lease_seconds / 3
                self.wake.wait(pause if due is None else max(min(due, pause), 0.0))
                self.wake.clear()
                if self.done:
                    break
                due = self._due()
                if due is not None and due <= 0:
                    # Out of time mid-step: cut the step now (a model's answer streaming for
                    # minutes), not at the next step boundary where `Meter.check` would see it.
                    limit = self.context.run.max_seconds
                    self.context.request_stop(
                        RunStatus.BUDGET_EXHAUSTED, why=f"max_seconds {limit} reached"
                    )
                crashpoints.hit("lease_renew", run=self.claim.fence.run_id)
                try:
                    renewal = scheduler.renew_lease(
                        self.claim.fence, lease_seconds=self.claim.lease_seconds
                    )
                except DatabaseError as error:
                    # Keep trying: the lease may survive a short database outage.
                    if reachability.is_unreachable(error):
                        reachability.went_away(
                            error, where=f"lease of run {self.claim.fence.run_id}"
                        )
                    else:
                        logger.warning("lease renewal of run %s failed", self.claim.fence.run_id)
                    connection.close()
                    continue
                if renewal.stop_requested:
                    self.context.request_stop(renewal.stop_reason)
                elif renewal.interrupt_requested:
                    self.context.interrupt()
                if renewal.pause_requested:
                    self.context.pausing = True  # after the step under way
        except LeaseLost:
            self.context.request_stop(RunStatus.CANCELLED)  # interrupt; its writes will fail
        finally:
            connection.close()

    def _due(self) -> float | None:
        """Seconds left before the run's duration cap (None: no cap, or already stopping)."""
        run = self.context.run
        if run.max_seconds is None or run.started_at is None or self.context.stop_reason:
            return None
        deadline = run.started_at + timedelta(seconds=run.max_seconds)
        return (deadline - timezone.now()).total_seconds()


# The lease keepers of the runs executing in this process, by run id: a steer notification
# (`kernel_run_steered`, migration 0017) pokes the run's keeper, so a stop, an interrupt or a
# pause reaches the step under way in milliseconds instead of at the next renewal.
_keepers: dict[int, LeaseKeeper] = {}
_keepers_lock = threading.Lock()


def poke(run_id: int) -> bool:
    """Have the keeper of `run_id`, if it executes here, read the owner's requests now."""
    with _keepers_lock:
        keeper = _keepers.get(run_id)
    if keeper is not None:
        keeper.wake.set()
    return keeper is not None


def execute(claim: Claim, draining: threading.Event | None = None) -> str:
    """Drive the run until it ends or waits; return what happened (for logs and tests).

    Program errors end the run `failed`; infrastructure errors (database, lost lease) leave it
    to its lease: another worker resumes it from the journal.
    """
    fence = claim.fence
    _reuse_or_reconnect()
    try:
        run = Run.objects.select_related("account").get(pk=fence.run_id)
        records = journal.load(fence.run_id)
        crashpoints.hit("run_loaded", run=fence.run_id)
    except DatabaseError as error:
        return _database_failed(fence.run_id, error, "cannot load run %s")
    context = RunContext(
        run=run, fence=fence, records=records, draining=draining or threading.Event()
    )
    context.meter.provider_caps = claim.provider_caps  # read by the claim
    if run.cancel_requested:
        context.request_stop(run.stop_reason)
    keeper = LeaseKeeper(claim, context)
    keeper.start()
    with _keepers_lock:
        _keepers[fence.run_id] = keeper
    try:
        try:
            context.check_stop()
            outcome = programs.get(run.program)(context)
        except Suspend as suspension:
            context.bill()
            scheduler.suspend(fence, runnable_at=suspension.runnable_at, reason=suspension.reason)
            return "waiting"
        except Stop as stop:
            context.bill()
            if stop.status == RunStatus.BUDGET_EXHAUSTED:
                runs.stop_descendants(fence.run_id, reason=stop.status)
            return scheduler.finish(fence, status=stop.status, error=stop.reason)
        except (LeaseLost, DatabaseError):
            raise
        except JournalMismatch as mismatch:
            context.bill()
            return scheduler.finish(fence, status=RunStatus.FAILED, error=mismatch.message)
        except Exception as error:  # the program's own failure: the run fails, never "succeeds"
            logger.exception("run %s failed", fence.run_id)
            context.bill()
            return scheduler.finish(
                fence, status=RunStatus.FAILED, error=f"{error.__class__.__name__}: {error}"
            )
        context.bill()
        return scheduler.finish(fence, status=outcome.status, output=outcome.output)
    except LeaseLost:
        logger.warning("run %s: lease lost; another worker owns it now", fence.run_id)
        return "lease_lost"
    except DatabaseError as error:
        return _database_failed(
            fence.run_id, error, "run %s: database error; its lease will expire"
        )
    finally:
        with _keepers_lock:
            if _keepers.get(fence.run_id) is keeper:
                del _keepers[fence.run_id]
        keeper.stop()


def _database_failed(run_id: int, error: DatabaseError, message: str) -> str:
    """A database outage cut the run short (one line for the outage, none per run); any other
    database error is logged with its traceback. Either way the journal has what committed."""
    connection.close()
    if reachability.is_unreachable(error):
        reachability.went_away(error, where=f"run {run_id}")
        return CUT_SHORT
    if reachability.is_disk_full(error):
        # Not even a hold could be written (kernel.diskfull): the lease expiring is the wait.
        logger.warning(
            "run %s: the database's disk is full; tried again when its lease expires: %s",
            run_id,
            error,
        )
        return "error"
    logger.exception(message, run_id)
    return "error"


def _reuse_or_reconnect() -> None:
    """Keep this worker thread's connection from run to run (a connection costs milliseconds),
    unless it broke, e.g. when the database restarted."""
    if connection.connection is not None and not connection.is_usable():
        connection.close()
