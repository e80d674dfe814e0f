"""The kernel benchmark: each kernel figure next to a floor measured in the same run.

Absolute numbers drift between runs on shared machines, ratios do not (docs/design.md §20), so
every part measures its own floor, finely interleaved with it:

1. one step: raw psycopg doing the journal's two commits vs `bench.paired` runs, free reads and
   idempotent writes (each one commit: its result rides on the next intent). The run's program
   alternates blocks of its own steps with floor blocks of as many steps (`Pairing`): many short
   pairs, each a ratio; the figure is their median, with their spread. The same again with both
   sides on `synchronous_commit = off`: the disk taken out, a figure of CPU and round trips.
   Commits per step are counted on both sides (transaction ids taken, `pg_snapshot_xmax`);
2. resume: reading a 1,000-step journal and replaying the program through `RunContext`;
3. throughput at K = 32: 32 threads of the floor vs 32 runs on two `proving_worker` processes,
   alternating round by round.

It writes runs, scratch tables and worker logs: `manage.py bench_kernel` refuses to run outside a
dedicated data dir (`make bench` uses `.data/bench`).
"""

from __future__ import annotations

import cProfile
import io
import math
import os
import pstats
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from agentos.core import database
from kernel import journal, programs, runs, scheduler, statements
from kernel.context import Done, RunContext, StepCall
from kernel.journal import Fence
from kernel.models import TERMINAL, Account, Effect, Run, RunStatus, StepKind
from kernel.programs import Outcome
from kernel.proving.figures import fig, judged, round_ratios, row, verdict
from kernel.proving.floor import (
    FloorRun,
    empty,
    horizon,
    measure_floor_throughput,
    raw_connect,
    scratch_tables,
    skip_wal_flush,
)
from kernel.worker import Worker

PROGRAM = "chaos.noop"
PAIRED = "bench.paired"
RESUME_STEPS = 1000
ROUNDS = 11  # throughput: floor/kernel alternations; a ratio is the median of theirs
BLOCK_STEPS = 40  # one step: the steps of each block of a pair
PAIRS = 80  # one step: floor/kernel pairs of blocks per run
RATIO_TARGET = 0.7  # kernel µs/step ÷ two-commit floor µs/step, at most (reads and writes)
FLATNESS_TARGET = 1.1  # a run's last quarter of pairs ÷ its first quarter, at most
RESUME_TARGET_MS = 20.0  # at most
THROUGHPUT_TARGET = 1.0  # kernel steps/s ÷ floor steps/s at K = 32, at least
POLL_SECONDS = 0.05
RUNS_TIMEOUT = 300.0

Say = Callable[[str], None]


class BenchError(Exception):
    """The benchmark could not measure (a run failed, workers did not come up): not a miss."""


# --- the kernel ---------------------------------------------------------------------------


def make_account() -> Account:
    return Account.objects.create(max_concurrent_runs=64)


def retire_leftovers() -> int:
    """Cancel unfinished runs of an interrupted earlier benchmark: they would be claimed first."""
    return Run.objects.exclude(status__in=TERMINAL).update(
        status=RunStatus.CANCELLED, runnable_at=None, lease_expires_at=None, lease_owner=""
    )


def start_noop(account: Account, steps: int, *, writes: bool = False) -> Run:
    return runs.start_run(
        account=account, program=PROGRAM, input={"steps": steps, "writes": writes}
    )


# --- one step, finely interleaved: blocks of the kernel's steps, each paired with the floor's --


@dataclass
class Pairs:
    """Pairs of blocks, in the run's order: each block's µs/step and commits/step, both sides."""

    kernel_us: list[float] = field(default_factory=list)
    floor_us: list[float] = field(default_factory=list)
    kernel_commits: list[float] = field(default_factory=list)
    floor_commits: list[float] = field(default_factory=list)

    def extend(self, other: Pairs) -> None:
        self.kernel_us += other.kernel_us
        self.floor_us += other.floor_us
        self.kernel_commits += other.kernel_commits
        self.floor_commits += other.floor_commits

    @property
    def ratios(self) -> list[float]:
        return round_ratios(self.kernel_us, self.floor_us)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def late_early(self) -> float:
        """The last quarter's median ratio over the first quarter's: a step costs what it did."""
        quarter = max(1, len(self.ratios) // 4)
        return statistics.median(self.ratios[-quarter:]) / statistics.median(self.ratios[:quarter])


@dataclass
class Pairing:
    """What `bench.paired` calls around each block of its steps: time it, then time as many
    floor steps on the floor's own connection, and count both blocks' commits."""

    floor: FloorRun
    steps: int
    pairs: Pairs = field(default_factory=Pairs)
    mark: int = 0

    def kernel_block_starts(self) -> None:
        self.mark = horizon(self.floor.conn)

    def kernel_block_ended(self, seconds: float) -> None:
        ended = horizon(self.floor.conn)
        self.pairs.kernel_us.append(seconds / self.steps * 1e6)
        self.pairs.kernel_commits.append((ended - self.mark) / self.steps)
        started = time.perf_counter()
        self.floor.steps(self.steps)
        elapsed = time.perf_counter() - started
        self.pairs.floor_us.append(elapsed / self.steps * 1e6)
        self.pairs.floor_commits.append((horizon(self.floor.conn) - ended) / self.steps)


# The pairing of the `bench.paired` run executing in this thread (`measure_pairs` sets it).
_pairing = threading.local()


def _nothing(call: StepCall) -> Done:
    return Done(None)


def paired(ctx: RunContext) -> Outcome:
    """`blocks` blocks of `steps` no-op steps (free reads, or idempotent writes with
    `"writes": true`), each followed by a floor block (`Pairing`); with `"no_disk": true`, this
    connection's commits skip their WAL flush, as the floor's do then."""
    pairing: Pairing = _pairing.current
    effect = Effect.IDEMPOTENT_WRITE if ctx.input.get("writes") else Effect.READ
    no_disk = bool(ctx.input.get("no_disk"))
    if no_disk:
        statements.execute("SET synchronous_commit TO off", {}, prepare=False)
    try:
        index = 0
        for _ in range(int(ctx.input["blocks"])):
            pairing.kernel_block_starts()
            started = time.perf_counter()
            for _ in range(pairing.steps):
                ctx.step(
                    StepKind.CHECKPOINT,
                    effect=effect,
                    name="noop",
                    request={"i": index},
                    execute=_nothing,
                )
                index += 1
            pairing.kernel_block_ended(time.perf_counter() - started)
    finally:
        if no_disk:
            statements.execute("RESET synchronous_commit", {}, prepare=False)
    return Outcome(RunStatus.DONE, None)


def measure_pairs(
    account: Account, *, blocks: int, steps: int, writes: bool, no_disk: bool
) -> Pairs:
    """One `bench.paired` run claimed and executed in this thread, its floor beside it."""
    with raw_connect() as conn:
        empty(conn)
        if no_disk:
            skip_wal_flush(conn)
        floor = FloorRun.create(conn, run_id=1)
        floor.steps(steps)  # prepares the floor's statements
        _pairing.current = Pairing(floor=floor, steps=steps)
        try:
            run = runs.start_run(
                account=account,
                program=PAIRED,
                input={"blocks": blocks, "writes": writes, "no_disk": no_disk},
            )
            _expect_done([run.pk], Worker(lease_seconds=60).work_one())
            return _pairing.current.pairs  # type: ignore[no-any-return]
        finally:
            del _pairing.current


def profile_kernel_step(account: Account, steps: int, *, top: int = 25) -> str:
    """cProfile of one in-process run: where a step's time goes, by own time."""
    run = start_noop(account, steps)
    profiler = cProfile.Profile()
    outcome = profiler.runcall(Worker(lease_seconds=60).work_one)
    _expect_done([run.pk], outcome)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.strip_dirs().sort_stats(pstats.SortKey.TIME).print_stats(top)
    stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(top)
    return out.getvalue()


def _expect_done(run_ids: list[int], outcome: str | None = "done") -> None:
    statuses = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "status"))
    wrong = {pk: status for pk, status in statuses.items() if status != RunStatus.DONE}
    if outcome != "done" or wrong:
        raise BenchError(f"benchmark runs did not end done (outcome {outcome!r}): {wrong}")


# --- resume -------------------------------------------------------------------------------


def make_resumable(run_id: int) -> None:
    """Bench-only: make an ended run claimable again, as if its worker had died."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE kernel_run SET status = 'running', runnable_at = now(), lease_owner = '',"
            " lease_expires_at = NULL, finished_at = NULL, output = NULL WHERE id = %s",
            [run_id],
        )


def replay(run_id: int) -> None:
    """What a resume costs the kernel: read the run and its journal, replay every step."""
    run = Run.objects.select_related("account").get(pk=run_id)
    records = journal.load(run_id)
    context = RunContext(run=run, fence=Fence(run_id=run_id, token=run.fence), records=records)
    outcome = programs.get(run.program)(context)
    if outcome.status != RunStatus.DONE or context.seq != len(records):
        raise BenchError(f"replay of run {run_id} did not return every recorded step")


@dataclass(frozen=True)
class Resume:
    fresh_ms: float  # a new connection, as a worker thread resuming a run has
    warm_ms: float  # connection open, statements prepared
    execution_ms: float  # the whole `work_one`: claim, lease keeper, replay, finish


def measure_resume(account: Account, *, repeats: int) -> Resume:
    """Medians over `repeats` resumes of one `RESUME_STEPS`-step run (writes: only finish)."""
    run_id = start_noop(account, RESUME_STEPS).pk
    _expect_done([run_id], Worker(lease_seconds=60).work_one())
    replay(run_id)  # warm-up: imports, plans

    def fresh() -> float:
        connection.close()
        return _timed(lambda: replay(run_id))

    def execution() -> float:
        make_resumable(run_id)
        started = time.perf_counter()
        outcome = Worker(lease_seconds=60).work_one()
        elapsed = time.perf_counter() - started
        _expect_done([run_id], outcome)
        return elapsed

    return Resume(
        fresh_ms=_median_ms(fresh, repeats),
        warm_ms=_median_ms(lambda: _timed(lambda: replay(run_id)), repeats),
        execution_ms=_median_ms(execution, repeats),
    )


def _timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _median_ms(sample: Callable[[], float], repeats: int) -> float:
    return statistics.median(sample() for _ in range(repeats)) * 1e3


# --- throughput: the real worker pool -------------------------------------------------------


@dataclass
class WorkerPool:
    """`proving_worker` processes (kernel workers that know `chaos.noop`) on this benchmark's
    database; stderr goes to the data dir."""

    size: int
    max_runs: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database.build_url(connection.settings_dict),
            "AGENTOS_DATA_DIR": str(settings.DATA_DIR),
        }
        argv = [
            sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "proving_worker",
            "--max-runs", str(self.max_runs), "--lease", "30", "--poll", "1",
        ]  # fmt: skip
        for index in range(self.size):
            log = (settings.DATA_DIR / f"bench-worker-{index}.log").open("wb")
            # Our own program with a fixed argv, no shell.
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=log)  # noqa: S603
            log.close()  # the child holds its own descriptor
            self.processes.append(process)

    def wait_listening(self, timeout: float = 60) -> None:
        """Until every worker LISTENs for the doorbell: its Django and its loop are up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                    [f"LISTEN {scheduler.CHANNEL}"],
                )
                (listening,) = cursor.fetchone() or (0,)
            if listening >= self.size:
                return
            time.sleep(POLL_SECONDS)
        raise BenchError(f"workers not listening after {timeout:.0f} s (see bench-worker-*.log)")

    def _check_alive(self) -> None:
        dead = [p.pid for p in self.processes if p.poll() is not None]
        if dead:
            raise BenchError(
                f"proving_worker {dead} exited (see {settings.DATA_DIR}/bench-worker-*.log)"
            )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def run_batch(self, account: Account, k: int, steps: int) -> float:
        """Release `k` ready runs at once and wait (polling) until all are done; seconds.

        Like the floor, whose threads connect and prepare before its clock starts, the runs are
        created before the clock: held back (runnable in a day), then made runnable in one
        statement, with the workers' doorbell rung.
        """
        run_ids = [start_noop(account, steps).pk for _ in range(k)]
        Run.objects.filter(pk__in=run_ids).update(runnable_at=timezone.now() + timedelta(days=1))
        started = time.perf_counter()
        Run.objects.filter(pk__in=run_ids).update(runnable_at=timezone.now())
        scheduler.ring()
        deadline = time.monotonic() + RUNS_TIMEOUT
        while True:
            statuses = list(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True))
            if all(status in TERMINAL for status in statuses):
                elapsed = time.perf_counter() - started
                _expect_done(run_ids)
                return elapsed
            if time.monotonic() > deadline:
                raise BenchError(f"{k} runs not ended after {RUNS_TIMEOUT:.0f} s")
            self._check_alive()
            time.sleep(POLL_SECONDS)


@contextmanager
def worker_pool(size: int, max_runs: int) -> Iterator[WorkerPool]:
    pool = WorkerPool(size=size, max_runs=max_runs)
    try:
        pool.start()
        pool.wait_listening()
        yield pool
    finally:
        pool.stop()


def measure_kernel_throughput(pool: WorkerPool, account: Account, k: int, steps: int) -> float:
    """Steps/s of `k` runs on the (started, warmed-up) pool, from their release to their end."""
    return k * steps / pool.run_batch(account, k, steps)


# --- the whole benchmark --------------------------------------------------------------------

# The one-step variants: (label, idempotent writes?, disk out?).
VARIANTS = (
    ("free reads", False, False),
    ("idempotent writes", True, False),
    ("free reads, no disk", False, True),
    ("idempotent writes, no disk", True, True),
)


@dataclass(frozen=True)
class Report:
    """Every sample; a figure is the median of its samples, with their spread (the middle half:
    25th to 75th percentile). A one-step ratio is the median of its pairs' ratios: a pair measures
    a block of the kernel's steps and a block of the floor's back to back, so a slow spell of the
    machine's disk (its fsyncs vary by tens of percent from one second to the next) weighs on
    both sides of one ratio instead of on one side of the medians."""

    block_steps: int
    pairs: dict[str, Pairs]  # by VARIANTS' label
    resume: Resume
    k: int
    k_steps: int
    floor_steps_s: list[float]
    kernel_steps_s: list[float]

    @property
    def ratio(self) -> float:
        return self.pairs["free reads"].ratio

    @property
    def write_ratio(self) -> float:
        """Steps with an effect, both ends announced in the event stream: the figure the
        target is about (one commit a step against the floor's two)."""
        return self.pairs["idempotent writes"].ratio

    @property
    def throughput_ratio(self) -> float:
        return statistics.median(round_ratios(self.kernel_steps_s, self.floor_steps_s))

    def lines(self) -> list[str]:
        resume_met = self.resume.fresh_ms <= RESUME_TARGET_MS
        count = len(self.pairs["free reads"].ratios)
        floor = Pairs()  # the durable lines' floors
        floor.extend(self.pairs["free reads"])
        floor.extend(self.pairs["idempotent writes"])
        rows = [
            f"1. One step: {count} pairs of {self.block_steps}-step blocks per line (the"
            " kernel's, then as many floor steps); median [25th-75th percentile]",
            row("floor, raw psycopg 3, prepared", floor.floor_us, "µs/step",
                 f"commits/step {fig(statistics.median(floor.floor_commits))}"),
        ]  # fmt: skip
        for label, writes, disk_out in VARIANTS:
            pairs = self.pairs[label]
            rows.append(
                row(f"{PAIRED}, {label}", pairs.kernel_us, "µs/step",
                     f"commits/step {fig(statistics.median(pairs.kernel_commits))}"
                     f"  (floor {fig(statistics.median(pairs.floor_us))} µs)")
            )  # fmt: skip
            target = "" if disk_out else judged(pairs.ratio, "≤", RATIO_TARGET)
            rows.append(row("  / floor", pairs.ratios, "", target))
            if writes and not disk_out:
                rows.append(
                    row("  last quarter / first quarter", [pairs.late_early], "",
                         judged(pairs.late_early, "≤", FLATNESS_TARGET))
                )  # fmt: skip
        rows += [
            f"2. Resume of a {RESUME_STEPS:,}-step run (median)",
            row("read + replay, new connection", [self.resume.fresh_ms], "ms",
                 f"{verdict(resume_met)} (target ≤ {RESUME_TARGET_MS:g} ms)"),
            row("read + replay, open connection", [self.resume.warm_ms], "ms"),
            row("whole execution, claim to finish", [self.resume.execution_ms], "ms"),
            f"3. Throughput, K = {self.k} runs x {self.k_steps} steps,"
            f" {len(self.floor_steps_s)} rounds",
            row(f"floor, {self.k} threads, own connections", self.floor_steps_s, "steps/s"),
            row("kernel, kernel_worker processes", self.kernel_steps_s, "steps/s"),
            row("kernel / floor", round_ratios(self.kernel_steps_s, self.floor_steps_s), "",
                 judged(self.throughput_ratio, "≥", THROUGHPUT_TARGET)),
        ]  # fmt: skip
        return rows

    def summary(self) -> str:
        """The last line, read by scripts: keep its keys stable."""
        reads, writes = self.pairs["free reads"], self.pairs["idempotent writes"]
        return (
            f"kernel_step_us={fig(statistics.median(reads.kernel_us))}"
            f" floor_us={fig(statistics.median(reads.floor_us))}"
            f" ratio={fig(self.ratio)} resume_1000_ms={fig(self.resume.fresh_ms)}"
            f" throughput_ratio_k32={fig(self.throughput_ratio)}"
            f" write_ratio={fig(self.write_ratio)}"
            f" write_late_early={fig(writes.late_early)}"
            f" ratio_no_disk={fig(self.pairs['free reads, no disk'].ratio)}"
            f" write_ratio_no_disk={fig(self.pairs['idempotent writes, no disk'].ratio)}"
            f" write_commits_per_step={fig(statistics.median(writes.kernel_commits))}"
        )


def run(
    *,
    steps: int = PAIRS * BLOCK_STEPS,
    rounds: int = ROUNDS,
    repeats: int = 7,
    k: int = 32,
    k_steps: int = 100,
    workers: int = 2,
    say: Say = print,
) -> Report:
    """Measure everything: `steps` per side of each one-step line, in pairs of `BLOCK_STEPS`;
    throughput over `rounds` floor/kernel alternations. `say` gets progress lines."""
    fresh_journal()
    retired = retire_leftovers()
    if retired:
        say(f"cancelled {retired} unfinished run(s) left by an earlier benchmark")
    account = make_account()
    block = min(BLOCK_STEPS, steps)
    blocks = max(1, steps // block)
    floor_steps_s: list[float] = []
    kernel_steps_s: list[float] = []
    pairs: dict[str, Pairs] = {}
    with scratch_tables():
        say(f"one step: {len(VARIANTS)} runs of {blocks} pairs of {block}-step blocks …")
        measure_pairs(account, blocks=4, steps=block, writes=True, no_disk=False)  # warm-up
        for label, writes, disk_out in VARIANTS:
            pairs[label] = measure_pairs(
                account, blocks=blocks, steps=block, writes=writes, no_disk=disk_out
            )
        say(f"resume: a {RESUME_STEPS}-step run, {repeats} times …")
        resume = measure_resume(account, repeats=repeats)
        say(f"throughput: {rounds} rounds of {k} runs x {k_steps} steps, floor then kernel …")
        with worker_pool(workers, max_runs=math.ceil(k / workers)) as pool:
            pool.run_batch(account, k, 10)  # warm-up: each worker's code paths and plans
            for _ in range(rounds):
                floor_steps_s.append(measure_floor_throughput(k, k_steps))
                kernel_steps_s.append(measure_kernel_throughput(pool, account, k, k_steps))
    return Report(
        block_steps=block,
        pairs=pairs,
        resume=resume,
        k=k,
        k_steps=k_steps,
        floor_steps_s=floor_steps_s,
        kernel_steps_s=kernel_steps_s,
    )


def call_migrate() -> None:
    """A new benchmark data dir starts empty."""
    call_command("migrate", verbosity=0, interactive=False)


def fresh_journal() -> None:
    """`call_migrate`, then an empty journal if the data dir was used before.

    The floor's tables start empty at every measurement; without this, the kernel's would hold
    every earlier benchmark's runs (hundreds of thousands of steps after a few `make bench`),
    its indexes deeper and its autovacuum busier run after run, and the ratios would drift from
    one run to the next for that alone. Only in the benchmark's own database (the commands
    refuse any other unless told)."""
    call_migrate()
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE kernel_run, kernel_event, kernel_dailyspend, kernel_providerspend CASCADE"
        )
