"""The kernel loop of one worker process: claim runnable runs, execute each in a thread.

Made of small steps that report whether there was work (`claim_one`), a doorbell (LISTEN on
`agentos_kernel`, plus a slow poll), and a stop flag. Runs leave the worker when they end or wait;
a crashed worker loses nothing: other workers resume its runs from the journal, at once when
they can prove its process is gone (`kernel.holders`: same machine), else when its leases expire.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import connection

from agentos.core import reachability
from kernel import execution, holders, leases, scheduler
from kernel.journal import Fence

logger = logging.getLogger(__name__)

# How often an idle worker looks (in /proc, no query) whether a lease holder on this machine died.
WATCH_SECONDS = 0.25
# The payload prefix of a steer notification (migration 0017).
STEER_PREFIX = "steer:"


class Doorbell(scheduler.Listener):
    """A plain NOTIFY (work may be claimable) sets an event; a steer notification
    (`steer:<run id>`, sent by the database when the owner stops, interrupts or pauses an
    executing run) pokes that run's lease keeper if it executes here."""

    def __init__(self) -> None:
        super().__init__("kernel-doorbell", self._heard)
        self.rung = threading.Event()

    def _heard(self, payload: str | None) -> None:
        steered = (payload or "").removeprefix(STEER_PREFIX)
        if payload is not None and steered != payload and steered.isdigit():
            execution.poke(int(steered))
        else:  # None: (re)connected, e.g. the database is back; what changed meanwhile waits
            self.rung.set()

    def wait(self, timeout: float) -> None:
        self.rung.wait(timeout)
        self.rung.clear()


class Worker:
    def __init__(
        self,
        *,
        name: str | None = None,
        max_runs: int | None = None,
        lease_seconds: float | None = None,
        poll_seconds: float | None = None,
    ) -> None:
        # A name whose death other workers can prove (`kernel.holders`), where /proc tells.
        holder = holders.this_process()
        self.name = name or (holder.name if holder else f"{socket.gethostname()}:{os.getpid()}")
        self.max_runs = max_runs or settings.KERNEL_RUNS_PER_WORKER
        self.lease_seconds = lease_seconds or settings.KERNEL_LEASE_SECONDS
        self.poll_seconds = poll_seconds or settings.KERNEL_POLL_SECONDS
        self.stopping = threading.Event()
        self.active: dict[int, Future[str]] = {}
        self._lock = threading.Lock()
        # While the database is unreachable: when to try again, and the leases of runs it cut
        # short, given back once it returns so they resume at once instead of when they expire.
        self.backoff = reachability.Backoff()
        self.retry_in: float | None = None
        self.cut_short: list[Fence] = []

    def claim_one(self) -> scheduler.Claim | None:
        return scheduler.claim_next_run(worker=self.name, lease_seconds=self.lease_seconds)

    def work_one(self) -> str | None:
        """Claim one run and execute it in this thread; None when nothing was runnable."""
        claim = self.claim_one()
        return execution.execute(claim, self.stopping) if claim else None

    def run_until_idle(self, *, limit: int = 10_000) -> list[str]:
        """Execute runnable runs one by one until none is left (tests, one-shot use)."""
        outcomes = []
        for _ in range(limit):
            outcome = self.work_one()
            if outcome is None:
                break
            outcomes.append(outcome)
        return outcomes

    def run_forever(self) -> None:
        """Keep up to `max_runs` runs executing until `stopping` is set.

        1. While there is a free slot, claim a run and submit it to the pool.
        2. When nothing is claimable (or no slot is free), wait for the doorbell or the poll.
        3. On stop, executing runs park themselves at their next step boundary (runnable at
           once, for any worker), so a graceful stop hands work over without waiting for leases.
        """
        doorbell = Doorbell()
        doorbell.start()
        try:
            with ThreadPoolExecutor(self.max_runs, thread_name_prefix="run") as pool:
                while not self.stopping.is_set():
                    claims = self._claim(self._free_slots())
                    for claim in claims:
                        future = pool.submit(execution.execute, claim, self.stopping)
                        with self._lock:
                            self.active[claim.fence.run_id] = future
                        future.add_done_callback(
                            functools.partial(self._done, claim.fence, doorbell)
                        )
                    if not claims:
                        self.idle_one(doorbell)
        finally:
            doorbell.stopping.set()
            doorbell.join(timeout=5)  # it stops listening within a second
            connection.close()

    def idle_one(self, doorbell: Doorbell) -> bool:
        """Wait for the doorbell, the slow poll, or the death of a lease holder on this machine;
        True when a holder died (its runs are claimable now).

        A worker killed outright rings no doorbell: the others watch the holders of live leases
        here (read from the database once per idle period, then looked up in /proc only).
        """
        watched = []
        if self.retry_in is None:
            try:
                watched = [h for h in leases.local_holders() if h.name != self.name]
            except Exception as error:  # the database may be restarting: plain poll
                if not reachability.is_unreachable(error):
                    logger.exception("reading the lease holders failed")
                connection.close()
        # While the database is away, the backoff's delay; the doorbell rings as soon as its
        # connection is back.
        wait = self.poll_seconds if self.retry_in is None else self.retry_in
        deadline = time.monotonic() + wait
        while not self.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if doorbell.rung.wait(min(left, WATCH_SECONDS) if watched else left):
                doorbell.rung.clear()
                return False
            if any(holders.gone(holder) for holder in watched):
                return True
        return False

    def _claim(self, slots: int) -> list[scheduler.Claim]:
        """Claim up to `slots` runs; on a database outage, none, and `retry_in` says when to
        try again (backoff). The first success after it gives back the runs it cut short."""
        if slots <= 0:
            return []
        try:
            self._give_back()
            claims = scheduler.claim_runs(
                worker=self.name, lease_seconds=self.lease_seconds, limit=slots
            )
        except Exception as error:  # retry after the poll, or the backoff's delay
            connection.close()  # a broken connection is not reused
            if reachability.is_unreachable(error):
                reachability.went_away(error, where="kernel loop")
                self.retry_in = self.backoff.next_delay()
            else:
                logger.exception("claim failed")
            return []
        reachability.came_back()
        self.backoff.reset()
        self.retry_in = None
        return claims

    def _give_back(self) -> None:
        """Release the leases of runs a database outage cut short (fenced: a run another worker
        took meanwhile is left alone)."""
        while self.cut_short:
            scheduler.release(self.cut_short[0])
            self.cut_short.pop(0)

    def _free_slots(self) -> int:
        with self._lock:
            return self.max_runs - len(self.active)

    def _done(self, fence: Fence, doorbell: Doorbell, future: Future[str]) -> None:
        with self._lock:
            self.active.pop(fence.run_id, None)
            finished = not future.cancelled() and future.exception() is None
            if finished and future.result() == execution.CUT_SHORT:
                self.cut_short.append(fence)
        doorbell.rung.set()  # a slot is free: look for work now
