"""Drives a chaos workload through real worker processes that SIGKILL themselves on purpose.

1. Create one workflow run per crash target (plus crash-free baseline runs), write the crash
   plan, and start `proving_worker` processes with it.
2. Until every run has ended: restart dead workers, answer the owner's waits like an owner
   would (approve; for an interrupted non-idempotent step, look at the world and say whether it
   happened), and cancel the runs meant to be cancelled once they wait.
3. Check the journal and the external world (`kernel.proving.chaos.check`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from agentos.core import database
from kernel import holders, journal, runs, scheduler
from kernel.context import DONE, NOT_DONE
from kernel.exceptions import KernelError
from kernel.models import Account, ChaosEffect, Run, RunStatus, Wait, WaitKind, WaitState
from kernel.proving.chaos import Report, Target, check

# The read step outlasts a lease renewal (a third of the lease), so `lease_renew` can fire.
WORKFLOW_INPUT = {"n": 1, "read_seconds": 1.0, "timer_seconds": 0.3}
CANCEL_INPUT = {**WORKFLOW_INPUT, "timer_seconds": 3600}


def proving_worker(env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    """A `manage.py proving_worker` (a kernel worker that knows the chaos programs), with the
    product's defaults (lease, poll) unless `extra`."""
    return subprocess.Popen(
        [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "proving_worker", *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@dataclass
class Pool:
    """Worker processes, restarted when they die."""

    size: int
    env: dict[str, str]
    lease: float
    runs_per_worker: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    deaths: int = 0
    paused: dict[int, float] = field(default_factory=dict)  # pid -> when to SIGCONT it
    pauses: int = 0

    def start(self) -> None:
        self.processes = [self.start_one() for _ in range(self.size)]

    def start_one(self) -> subprocess.Popen[bytes]:
        return proving_worker(
            self.env,
            "--lease",
            str(self.lease),
            "--poll",
            "0.5",
            "--max-runs",
            str(self.runs_per_worker),
        )

    def tend(self) -> None:
        now = time.monotonic()
        for index, process in enumerate(self.processes):
            if process.poll() is not None:
                self.deaths += 1
                self.paused.pop(process.pid, None)
                self.processes[index] = self.start_one()
            elif self.paused.get(process.pid, now + 1) <= now:
                process.send_signal(signal.SIGCONT)  # a zombie now: its leases were taken over
                del self.paused[process.pid]

    def pause_one(self, rng: random.Random) -> None:
        """SIGSTOP a worker past its leases, so others take its runs over while it sleeps."""
        candidates = [p for p in self.processes if p.poll() is None and p.pid not in self.paused]
        if candidates:
            process = rng.choice(candidates)
            process.send_signal(signal.SIGSTOP)
            self.paused[process.pid] = time.monotonic() + self.lease * 2
            self.pauses += 1

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass
class Workload:
    """The runs of one chaos round: crash-free baselines, then one run per crash target."""

    baseline: list[int]
    plan: list[dict[str, Any]]  # {"run", "point", "seq"}: the crash plan the workers read
    to_cancel: set[int]  # the `cancel_seen` targets' runs, which the owner stops once they wait

    @property
    def runs(self) -> list[int]:
        return self.baseline + [entry["run"] for entry in self.plan]


def start_workload(targets: list[Target], *, rng: random.Random, baseline_runs: int) -> Workload:
    account = Account.objects.create(max_concurrent_runs=64)
    workload = Workload(baseline=[], plan=[], to_cancel=set())
    for _ in range(baseline_runs):
        run = runs.start_run(account=account, program="chaos.workflow", input=WORKFLOW_INPUT)
        workload.baseline.append(run.pk)
    shuffled = list(targets)
    rng.shuffle(shuffled)
    for target in shuffled:
        cancel = target.point == "cancel_seen"
        run = runs.start_run(
            account=account,
            program="chaos.workflow",
            input=CANCEL_INPUT if cancel else WORKFLOW_INPUT,
        )
        workload.plan.append({"run": run.pk, "point": target.point, "seq": target.seq})
        if cancel:
            workload.to_cancel.add(run.pk)
    return workload


def write_crash_plan(plan: list[dict[str, Any]], *, lease: float) -> tuple[dict[str, str], Path]:
    """Write the crash plan to a fresh directory; return the workers' environment and the
    directory where each worker marks the targets it fired."""
    workdir = Path(tempfile.mkdtemp(prefix="agentos-chaos-"))
    fired = workdir / "fired"
    fired.mkdir()
    (workdir / "plan.json").write_text(json.dumps({"targets": plan, "fired_dir": str(fired)}))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": str(workdir / "data"),
        "KERNEL_CRASHPLAN": str(workdir / "plan.json"),
        "AGENTOS_LEASE_SECONDS": str(max(1, round(lease))),
    }
    return env, fired


@dataclass
class Disruptions:
    """A random worker SIGSTOPped every `pause_every` seconds; the database stopped abruptly
    (`pg_ctl stop -m immediate`) once, at `restart_at`."""

    rng: random.Random
    pause_every: float | None
    next_pause: float | None
    restart_at: float | None
    database_restarts: int = 0

    def apply(self, pool: Pool, say: Callable[[str], None]) -> None:
        now = time.monotonic()
        if self.next_pause is not None and self.pause_every and now >= self.next_pause:
            pool.pause_one(self.rng)
            self.next_pause = now + self.pause_every
        if self.restart_at is not None and now >= self.restart_at:
            self.restart_at = None
            say("chaos: stopping the database abruptly (pg_ctl stop -m immediate)")
            database.crash_and_restart_embedded()
            self.database_restarts += 1


def run_chaos(
    targets: list[Target],
    *,
    workers: int = 2,
    runs_per_worker: int = 1,
    require_every_target: bool = True,
    baseline_runs: int = 1,
    lease: float = 2.0,
    timeout: float = 300.0,
    seed: int | None = None,
    pause_every: float | None = None,
    restart_database_after: float | None = None,
    say: Callable[[str], None] = print,
) -> Report:
    """Run the workload; optionally SIGSTOP a random worker every `pause_every` seconds and stop
    the database abruptly (`pg_ctl stop -m immediate`) once, `restart_database_after` seconds in.
    """
    rng = random.Random(seed)  # noqa: S311  # reproducible shuffles, not secrets
    workload = start_workload(targets, rng=rng, baseline_runs=baseline_runs)
    env, fired = write_crash_plan(workload.plan, lease=lease)
    pool = Pool(size=workers, env=env, lease=lease, runs_per_worker=runs_per_worker)
    pool.start()
    started = time.monotonic()
    disruptions = Disruptions(
        rng,
        pause_every,
        next_pause=started + pause_every if pause_every else None,
        restart_at=started + restart_database_after if restart_database_after else None,
    )
    say(
        f"chaos: {len(workload.runs)} runs, {len(workload.plan)} crash targets, {workers} workers,"
        f" seed={seed}"
    )
    try:
        drive(pool, workload, disruptions, deadline=started + timeout, say=say)
    finally:
        pool.stop()
    report = Report(pauses=pool.pauses, database_restarts=disruptions.database_restarts)
    check(workload.runs, expected=expected_ends(workload), report=report)
    # With several runs per worker, one run's crash also kills the others mid-step: more chaos,
    # but a run killed that way may pass its own crash point on replay without stopping there.
    report.kills = pool.deaths
    fired_names = {path.name for path in fired.iterdir()}
    report.targets_fired = len(fired_names)
    if require_every_target and report.targets_fired != len(workload.plan):
        missing = {f"{e['run']}-{e['point']}-{e['seq']}" for e in workload.plan} - fired_names
        report.violations.append(f"{len(missing)} crash point(s) never fired: {sorted(missing)}")
    return report


def drive(
    pool: Pool,
    workload: Workload,
    disruptions: Disruptions,
    *,
    deadline: float,
    say: Callable[[str], None],
) -> None:
    """Until every run has ended (or the deadline): restart dead workers, disrupt, and act as
    the owner."""
    while time.monotonic() < deadline:
        pool.tend()
        disruptions.apply(pool, say)
        try:
            # A worker paused mid-transaction holds its row locks until it is resumed, and
            # resuming it is this loop's job: never wait on its locks, try again next tick.
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '500ms'")
                act_as_owner(workload.to_cancel)
        except DatabaseError:
            connection.close()  # the database restarted under us: reconnect next time
            continue
        if not Run.objects.filter(pk__in=workload.runs).exclude(status__in=_ENDED).exists():
            return
        time.sleep(0.1)
    say("chaos: timed out waiting for the runs to end")


def expected_ends(workload: Workload) -> dict[int, tuple[str, Any]]:
    """How each run must end: as the crash-free baseline did, or cancelled."""
    baseline = workload.baseline
    baseline_output = Run.objects.get(pk=baseline[0]).output if baseline else None
    return {
        run_id: (
            (RunStatus.CANCELLED, None)
            if run_id in workload.to_cancel
            else (RunStatus.DONE, baseline_output)
        )
        for run_id in workload.runs
    }


_ENDED = [status for status in RunStatus.values if status not in ("queued", "running", "waiting")]


# How the owner answers a question of an app above the kernel, by the question's `type` (an
# approval: through the approvals service, bound to its call's hash): True once answered.
# Registered by those apps (`kernel.proving.register_extensions`); the kernel cannot import them.
OWNER_ANSWERS: dict[str, Callable[[Wait], bool]] = {}


def act_as_owner(to_cancel: set[int], *, root: int | None = None) -> int:
    """Answer the open waits (of the runs under `root` only, if given) and cancel the runs of
    `to_cancel` once they wait on a timer; return how many waits were answered."""
    open_waits = Wait.objects.filter(state=WaitState.OPEN).exclude(kind=WaitKind.TIMER)
    if root is not None:
        open_waits = open_waits.filter(run__root_id=root)
    answered = 0
    for wait in open_waits:
        kind = wait.question.get("type") if isinstance(wait.question, dict) else None
        if wait.kind == WaitKind.HUMAN and kind in OWNER_ANSWERS:
            answered += OWNER_ANSWERS[kind](wait)
            continue
        if wait.kind == WaitKind.HUMAN:
            answer: Any = {"approve": True}
        else:  # reconcile: look at the world, as the owner would
            effect = ChaosEffect.objects.filter(
                key=journal.idempotency_key(wait.run_id, wait.seq)
            ).first()
            answer = {"verdict": DONE, "result": effect.value} if effect else {"verdict": NOT_DONE}
        with contextlib.suppress(KernelError):  # settled meanwhile
            runs.answer_wait(wait.pk, answer=answer, by="chaos-owner")
            answered += 1
    waiting = Run.objects.filter(
        pk__in=to_cancel,
        status=RunStatus.WAITING,
        cancel_requested=False,
        waits__kind=WaitKind.TIMER,
        waits__state=WaitState.OPEN,
    )
    for run in waiting:
        runs.request_stop(run.pk, by="chaos-owner")
    return answered


# --- Takeover: a killed worker's run resumes on another worker at once -----------------------

TAKEOVER_LIMIT_SECONDS = 5.0


def _until[T](what: str, read: Callable[[], T | None], *, timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while (value := read()) is None:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def _listeners() -> int:
    """Kernel workers connected to this database and listening for the claim doorbell."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query = %s",
            [f"LISTEN {scheduler.CHANNEL}"],
        )
        (count,) = cursor.fetchone() or (0,)
    return int(count)


@dataclass(frozen=True)
class Takeover:
    seconds: float  # from the SIGKILL to the run claimed again (its fence grew)
    victim: int
    survivor: int
    finished_by: int | None  # the pid that recorded the step's result


def run_takeover(*, step_seconds: float = 2.0, timeout: float = 60.0) -> Takeover:
    """Two workers with the default lease (30 s) and poll; SIGKILL the one executing a run
    mid-step and time how long the run takes to be claimed again by the other.

    Without proof of the holder's death the run would wait for its lease to run out.
    """
    account = Account.objects.create()
    run = runs.start_run(account=account, program="chaos.busy", input={"seconds": step_seconds})
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in ("AGENTOS_LEASE_SECONDS", "KERNEL_CRASHPLAN")
        },
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": tempfile.mkdtemp(prefix="agentos-takeover-"),
    }
    workers = [proving_worker(env), proving_worker(env)]
    try:
        _until("both workers", lambda: _listeners() >= 2 or None, timeout=timeout)
        owner = _until(
            "the step under way",
            lambda: (
                Run.objects.filter(pk=run.pk, steps__isnull=False)
                .values_list("lease_owner", flat=True)
                .first()
            ),
            timeout=timeout,
        )
        holder = holders.parse(owner)
        if holder is None:
            raise RuntimeError(f"the lease names no provable holder: {owner!r}")
        victim = next(p for p in workers if p.pid == holder.pid)
        survivor = next(p for p in workers if p is not victim)
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _until(
            "the takeover",
            lambda: Run.objects.filter(pk=run.pk, fence__gte=2).exists() or None,
            timeout=timeout,
        )
        seconds = time.monotonic() - killed
        _until(
            "the run's end",
            lambda: Run.objects.filter(pk=run.pk, status__in=_ENDED).exists() or None,
            timeout=timeout,
        )
    finally:
        for process in workers:
            if process.poll() is None:
                process.terminate()
        for process in workers:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    output = Run.objects.get(pk=run.pk).output
    pid = output.get("pid") if isinstance(output, dict) else None
    return Takeover(seconds, victim.pid, survivor.pid, pid)
