"""The in-process crash sweep: the crash points a workload passes, crashed at in turn, with the
invariants checked after each crash.

1. A dry pass of each seeded workload (`kernel.proving.scripted`) records every crash point its
   worker passes, in order: (point, run, seq), a run named by its place in its family.
2. Crashes. A death here is `crashpoints.Crash` (a `BaseException`: no product `except
   Exception` catches it) unwinding the stack, then what a dead process leaves behind: its
   connection closed (PostgreSQL rolls the open transaction back), its in-memory state gone
   (the run's context, its lease keeper, its held-back results), and a lease held by a provably
   dead holder (`kernel.holders`), which the next claim frees as it frees a killed worker's.
   - `chain` (the default): one run of the workload dies at the first crash point it reaches
     that it has not died at yet, again and again: each attempt gets one point further, and
     dies in the state the previous deaths left. A point is the dry pass's (point, run, seq),
     told apart by how many times the family parked or ended before it (a claim after a
     suspension is another claim), and dies at most once more than the dry pass passed it.
     After each death: the invariants that hold at any instant.
   - `single`: a fresh run of the workload for each point K of the dry pass, dying there once.
3. Fresh workers (the same process, a new connection) claim and execute until the family has
   ended, an owner answering its questions (`kernel.proving.harness.act_as_owner`); then
   everything must be as in the run that never crashed (`kernel.proving.shapes.compare`).

Workloads are deterministic and the sweep runs one worker at a time, so a run dies where its
workload's seed says: a failing point replays from that seed and the point's number
(`manage.py chaos --sweep-seed S --sweep-point K`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from django.db import connection
from psycopg import pq

from kernel import crashpoints, execution, holders, runs, scheduler
from kernel.models import Account, Run, RunStatus
from kernel.proving import scripted
from kernel.proving.chaos import Report
from kernel.proving.harness import act_as_owner
from kernel.proving.shapes import Shape, compare, invariants

LEASE_SECONDS = 30.0  # never runs out during a sweep: a dead worker's lease is freed, not aged
MAX_CLAIMS = 1000  # per workload run: a family still going after that many claims is stuck
MODES = ("chain", "single")
RECONNECT_EVERY = 8  # in a chain, the first death of every eight also reconnects (`die`)
_GOING = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
_ENDED = frozenset(RunStatus.values) - frozenset(_GOING)
# Points where the family made progress that a death cannot take back: what comes after is
# another occurrence of the same points (`Recorder`).
_PROGRESS = frozenset(("suspend_committed", "finish_committed"))


class Hit(NamedTuple):
    point: str
    run: int  # the run's place in its family, in order of first appearance (0: the root)
    seq: int

    def __str__(self) -> str:
        where = "root" if self.run == 0 else f"child {self.run}"
        return f"{self.point} ({where}, seq {self.seq})"


class Recorder:
    """The sweep's crash handler: records each crash point the worker passes in the family of
    `root`; raises `Crash` at the `crash_at`-th, or (`chain`: up to that many times) at each
    point it has not died at yet. Other threads (lease keepers, parallel reads) and other
    runs' points pass untouched."""

    def __init__(
        self, root: int, *, crash_at: int | None = None, chain: int = 0, dry: tuple[Hit, ...] = ()
    ) -> None:
        self.root = root
        self.crash_at = crash_at
        self.chain = chain
        # In a chain, a point dies as many times as the dry pass passed it, plus one (where a
        # recovery passes it again): a death that makes the owner answer again (a verdict on a
        # step that cannot be repeated) would otherwise come back after each answer, forever.
        self.allowed = Counter(dry)
        self.deaths: Counter[Hit] = Counter()
        self.hits: list[Hit] = []
        self.crashes: list[Hit] = []
        self.died_at: set[tuple[Hit, int]] = set()
        self.progress = 0
        self.armed = False
        self.thread = threading.get_ident()
        self.family: dict[int, int | None] = {root: 0}  # run id -> place (None: not ours)

    def __call__(self, point: str, run: int, seq: int) -> None:
        if not self.armed or threading.get_ident() != self.thread:
            return
        place = self.family.get(run, -1)
        if place == -1:
            ours = Run.objects.filter(pk=run, root_id=self.root).exists()
            place = self.family[run] = len(self.family) if ours else None
        if place is None:
            return
        hit = Hit(point, place, seq)
        self.hits.append(hit)
        if point in _PROGRESS:
            self.progress += 1
        if len(self.hits) - 1 == self.crash_at or (
            len(self.crashes) < self.chain
            and (hit, self.progress) not in self.died_at
            and self.deaths[hit] <= self.allowed[hit]
        ):
            self.died_at.add((hit, self.progress))
            self.deaths[hit] += 1
            self.crashes.append(hit)
            raise crashpoints.Crash(str(hit))


def worker_name() -> str:
    """A lease holder that is provably dead (this pid, another start time: a reused pid), so
    each claim frees the leases a crashed attempt left, as it does for a killed worker."""
    here = holders.this_process()
    if here is None:
        return "sweep-worker"
    return holders.Holder(here.host, here.pid, here.start + 1, here.space).name


def die(*, reconnect: bool = True) -> None:
    """What a process's death leaves: PostgreSQL rolls its open transaction back when its
    connection goes. Its leases stay held until a claim proves the holder dead (`worker_name`);
    where that cannot be proven, they are aged out as a lease running out would be.

    Without `reconnect`, a connection with no transaction open is kept: its session holds
    nothing a death would lose (locks are transaction-scoped, settings statement-local), and a
    new connection costs a fifth of a chain's death."""
    raw = connection.connection
    idle = raw is not None and raw.info.transaction_status == pq.TransactionStatus.IDLE
    if reconnect or not idle:
        connection.close()
    if holders.this_process() is None:
        Run.objects.filter(lease_owner="sweep-worker").update(lease_expires_at=None)


def drive(
    root: int,
    recorder: Recorder,
    *,
    worker: str,
    after_crash: Callable[[], None] | None = None,
    reconnect_every: int = 1,
) -> str | None:
    """Work the family of `root` to its end as a line of fresh workers would, one at a time;
    return None, or why it could not end. `after_crash` runs after each death; every
    `reconnect_every`-th death takes its connection along (`die`)."""
    for _ in range(MAX_CLAIMS):
        recorder.armed = True
        try:
            claim = scheduler.claim_next_run(worker=worker, lease_seconds=LEASE_SECONDS)
            if claim is not None:
                ended = execution.execute(claim)
                if claim.fence.run_id == root and ended in _ENDED:
                    return None  # its children ended before it (it joins them); checked after
        except crashpoints.Crash:
            recorder.armed = False
            die(reconnect=len(recorder.crashes) % reconnect_every == 1 % reconnect_every)
            if after_crash is not None:
                after_crash()
            continue
        finally:
            recorder.armed = False
        if claim is not None or act_as_owner(set(), root=root):
            continue
        left = Run.objects.filter(root_id=root, status__in=_GOING).values_list("pk", "status")
        return f"runs left unended with nothing to claim: {list(left)}" if left else None
    return f"the family of run {root} did not end in {MAX_CLAIMS} claims"


@dataclass
class Workload:
    seed: int
    ops: list[str]
    hits: list[Hit]
    baseline: Shape


@dataclass
class SweepReport(Report):
    seconds: float = 0.0
    workloads: int = 0
    failing: list[tuple[int, int]] = field(default_factory=list)  # (seed, point)
    by_point: Counter[str] = field(default_factory=Counter)  # deaths at each crash point
    last_seed: int = 0  # of the workloads drawn in order (`scripted.seeds`)
    extra_workloads: int = 0  # twins drawing the extensions' operations (`scripted.EXTRA_OPS`)

    @property
    def rate(self) -> float:
        return self.crash_points / self.seconds if self.seconds else 0.0


class Sweep:
    """Crashes of seeded workloads in this process's database, one worker at a time."""

    def __init__(self) -> None:
        self.account = Account.objects.create(max_concurrent_runs=64)
        self.worker = worker_name()
        self.report = SweepReport()

    def dry_pass(self, seed: int) -> Workload:
        """Run workload `seed` without a crash: where it passes, and how it ends."""
        ops = scripted.ops_of(seed)
        root, recorder, stuck = self._run(ops, Recorder(0))
        shape = Shape.of(root)
        trouble = [stuck] if stuck else []
        if shape.runs[0]["status"] != RunStatus.DONE:
            trouble.append(f"ended {shape.runs[0]['status']} without a crash")
        trouble += invariants(shape)
        for problem in trouble:
            self.report.violations.append(f"seed {seed} {ops} (no crash): {problem}")
        self.report.workloads += 1
        return Workload(seed, ops, recorder.hits, shape)

    def single(self, workload: Workload, point: int) -> None:
        """A fresh run of `workload` that dies at its `point`-th crash point, once."""
        root, recorder, stuck = self._run(workload.ops, Recorder(0, crash_at=point))
        found = [stuck] if stuck else []
        expected = workload.hits[point]
        if recorder.crashes != [expected]:
            found.append(f"died at {recorder.crashes}, not at the dry pass's {expected}")
        found += self._ended(root, workload)
        self.report.crash_points += 1
        self.report.by_point[expected.point] += 1
        self._blame(workload, point, f"crashed at {expected}", found, "--sweep-mode single")

    def chain(self, workload: Workload, limit: int) -> None:
        """One run of `workload` dying at each crash point it reaches (`limit` at most), with
        the invariants checked after each death."""
        state: dict[str, int] = {"root": 0}
        recorder = Recorder(0, chain=limit, dry=tuple(workload.hits))

        def after_crash() -> None:
            number = len(recorder.crashes) - 1
            self.report.crash_points += 1
            self.report.by_point[recorder.crashes[-1].point] += 1
            found = invariants(Shape.of(state["root"]))
            self._blame(workload, number, f"died at {recorder.crashes[-1]}", found)

        root, _recorder, stuck = self._run(workload.ops, recorder, state, after_crash)
        found = [stuck] if stuck else []
        found += self._ended(root, workload)
        last = max(len(recorder.crashes) - 1, 0)
        self._blame(workload, last, f"after {len(recorder.crashes)} deaths, at its end", found)

    def _ended(self, root: int, workload: Workload) -> list[str]:
        shape = Shape.of(root)
        self.report.steps += len(shape.steps)
        self.report.runs += len(shape.runs)
        return compare(shape, workload.baseline)

    def _blame(
        self, workload: Workload, point: int, where: str, found: list[str], mode: str = ""
    ) -> None:
        if not found:
            return
        self.report.failing.append((workload.seed, point))
        replay = f"--sweep-seed {workload.seed} --sweep-point {point} {mode}".rstrip()
        self.report.violations += [
            f"workload {workload.ops} {where}: {problem} (replay: manage.py chaos {replay})"
            for problem in found
        ]

    def _run(
        self,
        ops: list[str],
        recorder: Recorder,
        state: dict[str, int] | None = None,
        after_crash: Callable[[], None] | None = None,
    ) -> tuple[int, Recorder, str | None]:
        run = runs.start_run(account=self.account, program=scripted.PROGRAM, input={"ops": ops})
        recorder.root = run.pk
        recorder.family = {run.pk: 0}
        if state is not None:
            state["root"] = run.pk
        with crashpoints.handling(recorder):
            stuck = drive(
                run.pk,
                recorder,
                worker=self.worker,
                after_crash=after_crash,
                reconnect_every=1 if after_crash is None else RECONNECT_EVERY,
            )
        return run.pk, recorder, stuck


@contextmanager
def _quiet() -> Iterator[None]:
    """Each death frees a lease, which the kernel logs as a warning: not news in a sweep."""
    logger = logging.getLogger("kernel.leases")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def sweep(
    *,
    points: int,
    seed: int,
    mode: str = "chain",
    only: int | None = None,
    say: Callable[[str], None] = print,
    every: float = 30.0,
) -> SweepReport:
    """Crash `points` crash points of workloads `seed`, `seed + 1`, ... and their twins with the
    extensions' operations (`scripted.seeds`; each workload at all of its points before the
    next), or only point `only` of workload `seed`; say how it goes every `every` seconds."""
    if mode not in MODES:
        raise ValueError(f"No sweep mode {mode!r}: the modes are {', '.join(MODES)}.")
    started = time.monotonic()
    next_say = started + every
    sweeper = Sweep()
    report = sweeper.report
    with _quiet():
        for workload_seed in [seed] if only is not None else scripted.seeds(seed):
            if only is None and report.crash_points >= points:
                break
            workload = sweeper.dry_pass(workload_seed)
            if workload_seed >= scripted.EXTRA_SEEDS > seed:
                report.extra_workloads += 1
            else:
                report.last_seed = workload_seed
            if mode == "chain":
                limit = only + 1 if only is not None else points - report.crash_points
                sweeper.chain(workload, limit)
            else:
                chosen = range(len(workload.hits)) if only is None else [only]
                for point in chosen:
                    if only is None and report.crash_points >= points:
                        break
                    if point >= len(workload.hits):
                        report.violations.append(f"workload {workload_seed} has no point {point}")
                        break
                    sweeper.single(workload, point)
            if time.monotonic() >= next_say:
                next_say = time.monotonic() + every
                report.seconds = time.monotonic() - started
                say(
                    f"sweep: {report.crash_points} crash points, {report.workloads} workloads,"
                    f" {report.rate:.0f}/s, {len(report.violations)} violations"
                )
    report.seconds = time.monotonic() - started
    return report
