"""The in-process crash sweep: every crash point a workload passes, crashed at in turn, with the
invariants checked after each.

1. A dry pass of each seeded workload (`kernel.proving.scripted`) records every crash point its
   worker passes, in order: (point, run, seq), the run named by its place in the family.
2. For each point K of that list, a fresh run of the same workload: at the K-th crash point the
   worker dies. Here a death is `crashpoints.Crash` (a `BaseException`: no product `except
   Exception` catches it) unwinding the stack, then what a dead process leaves behind: its
   connection closed (PostgreSQL rolls back the open transaction), its in-memory state gone
   (the run's context, its lease keeper), and a lease held by a provably dead holder
   (`kernel.holders`), which the next claim frees as it frees a killed worker's.
3. Fresh workers (the same process, a new connection) claim and execute until the family has
   ended, an owner answering its questions (`kernel.proving.harness.act_as_owner`).
4. The checks: `kernel.proving.chaos.check` (ended as the crash-free run did, each effect applied
   once), then the journal (seqs contiguous, every step with its one result, the same steps as
   the crash-free run), no lease left held, the ledger debited as the crash-free run's, the
   owner's questions answered once and none left open.

Workloads are deterministic and the sweep runs one worker at a time, so the K-th crash point of
a crashed run is the K-th of the dry pass: a failing point replays alone from its workload's
seed and its number (`manage.py chaos --sweep-seed S --sweep-point K`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.db import connection

from kernel import crashpoints, execution, holders, journal, runs, scheduler
from kernel.models import Account, ChaosEffect, Run, RunStatus, Step, StepKind, Wait, WaitState
from kernel.proving import scripted
from kernel.proving.chaos import Report
from kernel.proving.harness import act_as_owner

LEASE_SECONDS = 30.0  # never runs out during a sweep: a dead worker's lease is freed, not aged
MAX_CLAIMS = 100  # per workload run: a family still going after that many claims is stuck
_LEDGER = ("usd_micros", "input_tokens", "output_tokens", "turns", "tool_calls")
# Results that name run ids or times, different in every run of a workload.
_UNSTABLE = frozenset((StepKind.SPAWN, StepKind.JOIN, StepKind.TIMER))


class Hit(NamedTuple):
    point: str
    run: int  # the run's place in its family, in order of first appearance (0: the root)
    seq: int

    def __str__(self) -> str:
        where = "root" if self.run == 0 else f"child {self.run}"
        return f"{self.point} ({where}, seq {self.seq})"


class Recorder:
    """The sweep's crash handler: records each crash point the worker passes in the family of
    `root`, and raises `Crash` at the `crash_at`-th. Other threads (lease keepers, parallel
    reads) and other runs' points pass untouched."""

    def __init__(self, root: int, crash_at: int | None = None) -> None:
        self.root = root
        self.crash_at = crash_at
        self.hits: list[Hit] = []
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
        self.hits.append(Hit(point, place, seq))
        if len(self.hits) - 1 == self.crash_at:
            raise crashpoints.Crash(str(self.hits[-1]))


def worker_name() -> str:
    """A lease holder that is provably dead (this pid, another start time: a reused pid), so
    each claim frees the leases a crashed attempt left, as it does for a killed worker."""
    here = holders.this_process()
    if here is None:
        return "sweep-worker"
    return holders.Holder(here.host, here.pid, here.start + 1, here.space).name


def die() -> None:
    """What a process's death leaves: PostgreSQL rolls its open transaction back when its
    connection goes. Its leases stay held until a claim proves the holder dead (`worker_name`);
    where that cannot be proven, they are aged out as a lease running out would be."""
    connection.close()
    if holders.this_process() is None:
        Run.objects.filter(lease_owner="sweep-worker").update(lease_expires_at=None)


def drive(root: int, recorder: Recorder, *, worker: str) -> str | None:
    """Work the family of `root` to its end as a line of fresh workers would, one at a time;
    return None, or why it could not end."""
    for _ in range(MAX_CLAIMS):
        recorder.armed = True
        try:
            claim = scheduler.claim_next_run(worker=worker, lease_seconds=LEASE_SECONDS)
            if claim is not None:
                ended = execution.execute(claim)
                if claim.fence.run_id == root and ended in _ENDED:
                    return None  # its children ended before it (it joins them); checked after
        except crashpoints.Crash:
            die()
            continue
        finally:
            recorder.armed = False
        if claim is not None or act_as_owner(set(), root=root):
            continue
        left = Run.objects.filter(root_id=root, status__in=_GOING).values_list("pk", "status")
        return f"runs left unended with nothing to claim: {list(left)}" if left else None
    return f"the family of run {root} did not end in {MAX_CLAIMS} claims"


_GOING = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
_ENDED = frozenset(RunStatus.values) - frozenset(_GOING)
_EFFECTS = ("ledger.put", "ledger.send", "ledger.pay")  # steps that change the world


@dataclass
class Shape:
    """What a workload's run left behind, in the terms the checks compare."""

    runs: list[dict[str, Any]]
    steps: list[tuple[Any, ...]]  # (place, seq, kind, name, request_hash, result, cost, finished)
    waits: list[tuple[Any, ...]]  # (place, seq, kind, state)
    applied: dict[tuple[int, int], int]  # (place, seq) -> times its effect was applied

    @classmethod
    def of(cls, root: int) -> Shape:
        fields = ("pk", "status", "output", "lease_owner", "lease_expires_at", *_LEDGER)
        family = list(Run.objects.filter(root_id=root).order_by("pk").values(*fields))
        place = {run["pk"]: index for index, run in enumerate(family)}
        steps = [
            (place[run_id], *rest)
            for run_id, *rest in Step.objects.filter(run_id__in=place)
            .order_by("run_id", "seq")
            .values_list(
                "run_id",
                "seq",
                "kind",
                "name",
                "request_hash",
                "result",
                "usd_micros",
                "finished_at",
            )
        ]
        waits = sorted(
            (place[run_id], *rest)
            for run_id, *rest in Wait.objects.filter(run_id__in=place).values_list(
                "run_id", "seq", "kind", "state"
            )
        )
        # The world outside the journal (`ChaosEffect`): one row per application of an effect.
        keys = {
            journal.idempotency_key(run, seq): (place[run], seq)
            for run, seq in _effect_steps(place)
        }
        applied: dict[tuple[int, int], int] = {}
        for key, run_id, seq in ChaosEffect.objects.filter(run_id_value__in=place).values_list(
            "key", "run_id_value", "seq"
        ):
            step = keys.get(key, (place[run_id], -seq))  # an effect no step of ours asked for
            applied[step] = applied.get(step, 0) + 1
        for step in keys.values():
            applied.setdefault(step, 0)
        return cls(family, steps, waits, applied)


def _effect_steps(place: dict[int, int]) -> list[tuple[int, int]]:
    return list(
        Step.objects.filter(run_id__in=place, name__in=_EFFECTS).values_list("run_id", "seq")
    )


def compare(shape: Shape, baseline: Shape) -> list[str]:
    """The invariants, against the run that never crashed: each effect applied once (as
    `kernel.proving.chaos.check` counts them), the journal, leases, the ledger, the waits."""
    found = [
        f"run {place} step {seq} applied {count} times"
        if seq > 0
        else f"run {place}: an effect of step {-seq} that has no such step"
        for (place, seq), count in sorted(shape.applied.items())
        if count != 1
    ]
    if len(shape.runs) != len(baseline.runs):
        found.append(f"{len(shape.runs)} runs in the family, {len(baseline.runs)} without crash")
    for place, (run, calm) in enumerate(zip(shape.runs, baseline.runs, strict=False)):
        if run["status"] != calm["status"] or run["output"] != calm["output"]:
            found.append(f"run {place} ended {run['status']} {run['output']!r}")
        if run["lease_owner"] or run["lease_expires_at"] is not None:
            found.append(f"run {place} still leased to {run['lease_owner']!r}")
        if ledger := {k: run[k] for k in _LEDGER if run[k] != calm[k]}:
            found.append(f"run {place} ledger {ledger}, { ({k: calm[k] for k in ledger}) } without")
    seqs: dict[int, list[int]] = {}
    for place, seq, *_ in shape.steps:
        seqs.setdefault(place, []).append(seq)
    for place, numbers in seqs.items():
        if numbers != list(range(1, len(numbers) + 1)):
            found.append(f"run {place} journal seqs {numbers}: not contiguous from 1")
    if len(shape.steps) != len(baseline.steps):
        found.append(f"{len(shape.steps)} steps, {len(baseline.steps)} without crash")
    for step, calm in zip(shape.steps, baseline.steps, strict=False):
        place, seq, kind, name, hashed, result, cost, finished = step
        if finished is None:
            found.append(f"run {place} step {seq} ({name}) has no result")
        if (kind, name) != calm[2:4] or (kind != StepKind.JOIN and hashed != calm[4]):
            found.append(f"run {place} step {seq} is {kind} {name}, {calm[2]} {calm[3]} without")
        elif kind not in _UNSTABLE and result != calm[5]:
            found.append(f"run {place} step {seq} ({name}) result {result!r}, {calm[5]!r} without")
        elif cost != calm[6]:
            found.append(f"run {place} step {seq} ({name}) cost {cost} µ$, {calm[6]} without")
    for place, seq, kind, state in shape.waits:
        if state == WaitState.OPEN:
            found.append(f"run {place} step {seq}: its {kind} wait is still open")
    # An owner's question asked once per wait step and answered once: the same as without crash
    # (reconciliation questions come only from crashes, so they are not compared).
    human = [wait for wait in shape.waits if wait[2] == "human"]
    if human != [wait for wait in baseline.waits if wait[2] == "human"]:
        found.append(f"owner waits {human}, not as without crash")
    return found


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


class Sweep:
    """Crash points of seeded workloads, one run each, in the caller's database."""

    def __init__(self, *, say: Callable[[str], None] = print) -> None:
        self.say = say
        self.account = Account.objects.create(max_concurrent_runs=64)
        self.worker = worker_name()
        self.report = SweepReport()

    def dry_pass(self, seed: int) -> Workload:
        """Run workload `seed` without a crash: where it passes, and how it ends."""
        ops = scripted.ops_of(seed)
        root, recorder, stuck = self._run(ops, crash_at=None)
        shape = Shape.of(root)
        workload = Workload(seed, ops, recorder.hits, shape)
        trouble = [stuck] if stuck else []
        if shape.runs[0]["status"] != RunStatus.DONE:
            trouble.append(f"ended {shape.runs[0]['status']} without a crash")
        for problem in trouble:
            self.report.violations.append(f"seed {seed} {ops} (no crash): {problem}")
        self.report.workloads += 1
        return workload

    def crash_at(self, workload: Workload, point: int) -> list[str]:
        """Crash workload `workload` at its `point`-th crash point; return what went wrong."""
        root, recorder, stuck = self._run(workload.ops, crash_at=point)
        found = [stuck] if stuck else []
        if len(recorder.hits) <= point or recorder.hits[point] != workload.hits[point]:
            seen = recorder.hits[point] if len(recorder.hits) > point else "nothing"
            found.append(f"crashed at {seen}, not at the dry pass's {workload.hits[point]}")
        shape = Shape.of(root)
        found += compare(shape, workload.baseline)
        self.report.crash_points += 1
        self.report.steps += len(shape.steps)
        self.report.runs += len(shape.runs)
        if found:
            self.report.failing.append((workload.seed, point))
            self.report.violations += [
                f"{workload.ops} crashed at {workload.hits[point]}: {problem}"
                f" (replay: manage.py chaos --sweep-seed {workload.seed} --sweep-point {point})"
                for problem in found
            ]
        return found

    def _run(self, ops: list[str], *, crash_at: int | None) -> tuple[int, Recorder, str | None]:
        run = runs.start_run(account=self.account, program=scripted.PROGRAM, input={"ops": ops})
        recorder = Recorder(run.pk, crash_at)
        with crashpoints.handling(recorder):
            stuck = drive(run.pk, recorder, worker=self.worker)
        return run.pk, recorder, stuck


def sweep(
    *, points: int, seed: int, only: int | None = None, say: Callable[[str], None] = print
) -> SweepReport:
    """Crash `points` crash points of workloads `seed`, `seed + 1`, ... in turn (each workload at
    every one of its points), or only point `only` of workload `seed`."""
    started = time.monotonic()
    sweeper = Sweep(say=say)
    report = sweeper.report
    workload_seed = seed
    while report.crash_points < points:
        workload = sweeper.dry_pass(workload_seed)
        chosen = [only] if only is not None else range(len(workload.hits))
        for point in chosen:
            if report.crash_points >= points and only is None:
                break
            if point >= len(workload.hits):
                report.violations.append(f"seed {seed} has {len(workload.hits)} crash points")
                break
            sweeper.crash_at(workload, point)
        if only is not None:
            break
        workload_seed += 1
    report.seconds = time.monotonic() - started
    return report
