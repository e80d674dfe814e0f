"""Drives a chaos workload through real worker processes that SIGKILL themselves on purpose.

1. Create one workflow run per crash target (plus crash-free baseline runs), write the crash
   plan, and start `kernel_worker` processes with it.
2. Until every run has ended: restart dead workers, answer the owner's waits like an owner
   would (approve; for an interrupted non-idempotent step, look at the world and say whether it
   happened), and cancel the runs meant to be cancelled once they wait.
3. Check the journal and the external world (`kernel.chaos.check`).
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

from agentos import database
from kernel import holders, runs, scheduler
from kernel.chaos import Report, Target, check
from kernel.context import DONE, NOT_DONE
from kernel.exceptions import KernelError
from kernel.models import Account, ChaosEffect, Run, RunStatus, Wait, WaitKind, WaitState

# The read step outlasts a lease renewal (a third of the lease), so `lease_renew` can fire.
WORKFLOW_INPUT = {"n": 1, "read_seconds": 1.0, "timer_seconds": 0.3}
CANCEL_INPUT = {**WORKFLOW_INPUT, "timer_seconds": 3600}


@dataclass
class Pool:
    """Worker processes, restarted when they die."""

    size: int
    env: dict[str, str]
    lease: float
    runs_per_worker: int
    processes: list[subprocess.Popen[bytes]]
    deaths: int = 0

    def start_one(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                str(Path(settings.BASE_DIR) / "manage.py"),
                "kernel_worker",
                "--lease",
                str(self.lease),
                "--poll",
                "0.5",
                "--max-runs",
                str(self.runs_per_worker),
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    paused: dict[int, float] = field(default_factory=dict)  # pid -> when to SIGCONT it
    pauses: int = 0

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
    account = Account.objects.create(max_concurrent_runs=64)
    expected: dict[int, tuple[str, Any]] = {}
    report_restarts = 0
    plan: list[dict[str, Any]] = []
    baseline: list[int] = []
    for _ in range(baseline_runs):
        run = runs.start_run(account=account, program="chaos.workflow", input=WORKFLOW_INPUT)
        baseline.append(run.pk)
    shuffled = list(targets)
    rng.shuffle(shuffled)
    to_cancel: set[int] = set()
    for target in shuffled:
        cancel = target.point == "cancel_seen"
        run = runs.start_run(
            account=account,
            program="chaos.workflow",
            input=CANCEL_INPUT if cancel else WORKFLOW_INPUT,
        )
        plan.append({"run": run.pk, "point": target.point, "seq": target.seq})
        if cancel:
            to_cancel.add(run.pk)
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
    pool = Pool(size=workers, env=env, lease=lease, runs_per_worker=runs_per_worker, processes=[])
    pool.processes = [pool.start_one() for _ in range(workers)]
    all_runs = baseline + [entry["run"] for entry in plan]
    started = time.monotonic()
    deadline = started + timeout
    next_pause = started + pause_every if pause_every else None
    restart_at = started + restart_database_after if restart_database_after else None
    say(f"chaos: {len(all_runs)} runs, {len(plan)} crash targets, {workers} workers, seed={seed}")
    try:
        while time.monotonic() < deadline:
            pool.tend()
            now = time.monotonic()
            if next_pause is not None and pause_every and now >= next_pause:
                pool.pause_one(rng)
                next_pause = now + pause_every
            if restart_at is not None and now >= restart_at:
                restart_at = None
                say("chaos: stopping the database abruptly (pg_ctl stop -m immediate)")
                database.crash_and_restart_embedded()
                report_restarts += 1
            try:
                # A worker paused mid-transaction holds its row locks until it is resumed, and
                # resuming it is this loop's job: never wait on its locks, try again next tick.
                with transaction.atomic():
                    with connection.cursor() as cursor:
                        cursor.execute("SET LOCAL lock_timeout = '500ms'")
                    act_as_owner(to_cancel)
            except DatabaseError:
                connection.close()  # the database restarted under us: reconnect next time
                continue
            if not Run.objects.filter(pk__in=all_runs).exclude(status__in=_ENDED).exists():
                break
            time.sleep(0.1)
        else:
            say("chaos: timed out waiting for the runs to end")
    finally:
        pool.stop()
    baseline_output = Run.objects.get(pk=baseline[0]).output if baseline else None
    for run_id in all_runs:
        expected[run_id] = (
            (RunStatus.CANCELLED, None)
            if run_id in to_cancel
            else (RunStatus.DONE, baseline_output)
        )
    report = Report(pauses=pool.pauses, database_restarts=report_restarts)
    check(all_runs, expected=expected, report=report)
    # With several runs per worker, one run's crash also kills the others mid-step: more chaos,
    # but a run killed that way may pass its own crash point on replay without stopping there.
    report.kills = pool.deaths
    report.targets_fired = len(list(fired.iterdir()))
    if require_every_target and report.targets_fired != len(plan):
        missing = {f"{e['run']}-{e['point']}-{e['seq']}" for e in plan} - {
            path.name for path in fired.iterdir()
        }
        report.violations.append(f"{len(missing)} crash point(s) never fired: {sorted(missing)}")
    return report


_ENDED = [status for status in RunStatus.values if status not in ("queued", "running", "waiting")]


def act_as_owner(to_cancel: set[int]) -> None:
    for wait in Wait.objects.filter(state=WaitState.OPEN).exclude(kind=WaitKind.TIMER):
        if wait.kind == WaitKind.HUMAN:
            answer: Any = {"approve": True}
        else:  # reconcile: look at the world, as the owner would
            from kernel import journal

            effect = ChaosEffect.objects.filter(
                key=journal.idempotency_key(wait.run_id, wait.seq)
            ).first()
            answer = {"verdict": DONE, "result": effect.value} if effect else {"verdict": NOT_DONE}
        with contextlib.suppress(KernelError):  # settled meanwhile
            runs.answer_wait(wait.pk, answer=answer, by="chaos-owner")
    waiting = Run.objects.filter(
        pk__in=to_cancel,
        status=RunStatus.WAITING,
        cancel_requested=False,
        waits__kind=WaitKind.TIMER,
        waits__state=WaitState.OPEN,
    )
    for run in waiting:
        runs.request_stop(run.pk, by="chaos-owner")


# --- Takeover: a killed worker's run resumes on another worker at once -----------------------

TAKEOVER_LIMIT_SECONDS = 5.0


def kernel_worker(env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    """A `manage.py kernel_worker` with the product's defaults (lease, poll) unless `extra`."""
    return subprocess.Popen(
        [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "kernel_worker", *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


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
    workers = [kernel_worker(env), kernel_worker(env)]
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
