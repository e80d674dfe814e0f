"""The chaos workload: programs that use every step kind and effect class against a small
"external world" (`ChaosEffect` rows, outside the journal), and the checks run after the kills.

Used by `manage.py chaos` and by tests/chaos. Everything a program returns is deterministic, so a
crashed-and-resumed run must end exactly like a run that never crashed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db.models import Count
from django.utils.module_loading import import_string

from kernel import journal, leases
from kernel.budgets import Cost
from kernel.context import Done, RunContext, StepCall
from kernel.models import ChaosEffect, Effect, Run, RunStatus, Step, StepKind
from kernel.programs import Outcome

MODEL_COST = Cost(input_tokens=40, output_tokens=10, cache_read_tokens=5, usd_micros=120)

# The workflow's steps, by seq: what the crash matrix aims at.
WORKFLOW_STEPS = {
    1: "model_call",
    2: "read (slow)",
    3: "idempotent_write",
    4: "non_idempotent with probe",
    5: "non_idempotent without probe (owner verdict)",
    6: "timer",
    7: "spawn",
    8: "join",
    9: "wait_human",
    10: "checkpoint",
    11: "compaction",
    12: "verdict",
}


def fake_model(call: StepCall) -> Done:
    return Done({"text": f"answer to {call.request['prompt']}"}, MODEL_COST)


def slow_read(call: StepCall) -> Done:
    # Long enough for lease renewals to happen while it runs; stops early when asked to.
    call.stopping.wait(float(call.request.get("seconds", 0)))
    return Done({"value": call.request["n"] * 2})


def idempotent_put(call: StepCall) -> Done:
    """Writes once per idempotency key; a replay finds and returns the earlier result.

    The world checks the fencing token (`leases.fenced`), so a zombie that wakes up mid-write
    after a takeover cannot write a second time behind the new owner's back.
    """
    with leases.fenced(call.fence):
        existing = ChaosEffect.objects.filter(key=call.idempotency_key).first()
        if existing is None:
            existing = _apply(call, Effect.IDEMPOTENT_WRITE)
    return Done(existing.value)


def blind_append(call: StepCall) -> Done:
    """Applies the effect every time it is called: only the kernel may keep it from repeating
    (and the fencing token, which this world checks, from a zombie)."""
    with leases.fenced(call.fence):
        return Done(_apply(call, Effect.NON_IDEMPOTENT).value)


def probe(call: StepCall) -> Done | None:
    """The "already done?" check of `blind_append`."""
    existing = ChaosEffect.objects.filter(key=call.idempotency_key).first()
    return Done(existing.value) if existing else None


def _apply(call: StepCall, effect: str) -> ChaosEffect:
    return ChaosEffect.objects.create(
        key=call.idempotency_key,
        run_id_value=call.run_id,
        seq=call.seq,
        effect=effect,
        value={"applied": call.request["value"]},
    )


def workflow(ctx: RunContext) -> Outcome:
    n = int(ctx.input.get("n", 1))
    out: dict[str, Any] = {}
    out["plan"] = ctx.step(
        StepKind.MODEL_CALL,
        effect=Effect.MODEL_CALL,
        name="fake-model",
        request={"prompt": f"plan {n}"},
        execute=fake_model,
    )
    out["read"] = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name="slow-read",
        request={"n": n, "seconds": ctx.input.get("read_seconds", 0)},
        execute=slow_read,
    )
    out["write"] = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.IDEMPOTENT_WRITE,
        name="ledger.put",
        request={"value": n},
        execute=idempotent_put,
    )
    out["send"] = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.NON_IDEMPOTENT,
        name="ledger.send",
        request={"value": n + 1},
        execute=blind_append,
        probe=probe,
    )
    out["pay"] = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.NON_IDEMPOTENT,
        name="ledger.pay",
        request={"value": n + 2},
        execute=blind_append,
    )
    ctx.sleep(timedelta(seconds=float(ctx.input.get("timer_seconds", 0.2))))
    out["timer"] = "fired"
    child = ctx.spawn("chaos.child", {"n": n})
    out["children"] = [entry for _, entry in sorted(ctx.join([child]).items())]
    out["owner"] = ctx.wait_human({"approve": f"workflow {n}"}, expires_in=timedelta(hours=1))
    ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name="checkpoint",
        request={"n": n},
        execute=lambda call: Done({"saved": True}),
    )
    out["summary"] = ctx.step(
        StepKind.COMPACTION,
        effect=Effect.MODEL_CALL,
        name="fake-model",
        request={"prompt": f"summarise {n}"},
        execute=fake_model,
    )
    out["verdict"] = ctx.step(
        StepKind.VERDICT,
        effect=Effect.READ,
        name="verdict",
        request={"n": n},
        execute=lambda call: Done({"passed": True}),
    )
    return Outcome(RunStatus.DONE, out)


def child(ctx: RunContext) -> Outcome:
    n = int(ctx.input.get("n", 1))
    text = ctx.step(
        StepKind.MODEL_CALL,
        effect=Effect.MODEL_CALL,
        name="fake-model",
        request={"prompt": f"child {n}"},
        execute=fake_model,
    )
    stored = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.IDEMPOTENT_WRITE,
        name="ledger.put",
        request={"value": n * 10},
        execute=idempotent_put,
    )
    return Outcome(RunStatus.DONE, {"text": text, "stored": stored})


def noop(ctx: RunContext) -> Outcome:
    """`steps` no-op checkpoints: the benchmark's workload. Free reads by default (their result
    rides on the next intent); with `"writes": true`, idempotent writes (an intent commit, then
    a synchronous result commit: what a step with an effect pays)."""
    effect = Effect.IDEMPOTENT_WRITE if ctx.input.get("writes") else Effect.READ
    for index in range(int(ctx.input.get("steps", 1))):
        ctx.step(
            StepKind.CHECKPOINT,
            effect=effect,
            name="noop",
            request={"i": index},
            execute=lambda call: Done(None),
        )
    return Outcome(RunStatus.DONE, None)


def busy(ctx: RunContext) -> Outcome:
    """One long step that ignores stop requests (a stuck tool): the fencing test's workload."""

    def sleep(call: StepCall) -> Done:
        time.sleep(call.request["s"])
        return Done({"slept": call.request["s"], "pid": os.getpid()})

    result = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name="busy",
        request={"s": ctx.input["seconds"]},
        execute=sleep,
    )
    return Outcome(RunStatus.DONE, result)


@dataclass
class Report:
    runs: int = 0
    steps: int = 0
    kills: int = 0
    crash_points: int = 0  # in-process crashes of the sweep (`kernel.proving.sweep`)
    targets_fired: int = 0
    pauses: int = 0
    database_restarts: int = 0
    violations: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"chaos kills={self.kills} steps={self.steps} crash_points={self.crash_points}"
            f" violations={len(self.violations)}"
        )

    def add(self, other: Report, name: str) -> None:
        """Count `other` (a round, a case) in this report; its violations named `name`."""
        self.runs += other.runs
        self.steps += other.steps
        self.kills += other.kills
        self.crash_points += other.crash_points
        self.targets_fired += other.targets_fired
        self.pauses += other.pauses
        self.database_restarts += other.database_restarts
        self.violations.extend(f"{name}: {violation}" for violation in other.violations)


class Case(Protocol):
    """A chaos case of an app above the kernel: it drives its own worker processes, kills them,
    checks what it is about, and reports its kills and violations."""

    def __call__(self, *, say: Callable[[str], None]) -> Report: ...


def cases() -> list[tuple[str, Case]]:
    """The cases listed in `settings.CHAOS_CASES` (dotted paths), imported now: the kernel runs
    them without importing the apps above it by name (their worktrees, missions, tools)."""
    return [(path.rpartition(".")[2], import_string(path)) for path in settings.CHAOS_CASES]


def check(run_ids: list[int], *, expected: dict[int, tuple[str, Any]], report: Report) -> None:
    """Check the journal and the external world after a chaos workload.

    - every run ended with the status and output of a run that never crashed;
    - each step has one intent (a unique constraint) and, in an ended run, one result;
    - each idempotency key was applied once to the external world; a non-idempotent step at most
      once, and exactly once when its result says it happened.
    """
    runs = {run.pk: run for run in Run.objects.filter(pk__in=run_ids)}
    family = list(Run.objects.filter(root_id__in=run_ids).values_list("pk", flat=True))
    report.runs = len(family)
    for run_id, (status, output) in expected.items():
        run = runs[run_id]
        if run.status != status:
            report.violations.append(f"run {run_id} ended {run.status}, expected {status}")
        elif output is not None and run.output != output:
            report.violations.append(f"run {run_id} output differs from the crash-free run")
    steps = Step.objects.filter(run_id__in=family)
    report.steps = steps.count()
    for step in steps.filter(finished_at__isnull=True):
        if Run.objects.get(pk=step.run_id).status == RunStatus.DONE:
            report.violations.append(f"run {step.run_id} step {step.seq} has no result")
    applied = {
        row["key"]: row["n"]
        for row in ChaosEffect.objects.filter(run_id_value__in=family)
        .values("key")
        .annotate(n=Count("id"))
    }
    for step in steps.filter(effect__in=[Effect.IDEMPOTENT_WRITE, Effect.NON_IDEMPOTENT]):
        if step.name not in ("ledger.put", "ledger.send", "ledger.pay"):
            continue
        count = applied.get(journal.idempotency_key(step.run_id, step.seq), 0)
        if count > 1:
            report.violations.append(
                f"run {step.run_id} step {step.seq} ({step.name}) applied {count} times"
            )
        if step.finished_at is not None and count != 1:
            report.violations.append(
                f"run {step.run_id} step {step.seq} ({step.name}) has a result but was applied"
                f" {count} times"
            )


# --- The harness: workers that crash on purpose, an owner that answers, and the checks --------


@dataclass(frozen=True)
class Target:
    point: str
    seq: int = 0


# Each kill point once, at the step where it matters most (the in-process sweep,
# `kernel.proving.sweep`, dies at every point of every step kind): the effect-bearing steps
# around their effect, a model call and a spawn around their commits.
QUICK_MATRIX: list[Target] = [
    *(Target(point, 0) for point in ("claim_committed", "lease_renew", "before_finish")),
    Target("before_intent_commit", 5),
    Target("after_intent_commit", 4),
    Target("after_effect_before_result", 4),
    Target("after_result_commit", 5),
    Target("wait_recorded", 9),
    Target("cancel_seen", 0),
]


def full_matrix() -> list[Target]:
    """Every crash point at every workflow step it can happen at."""
    step_points = (
        "before_intent_commit",
        "after_intent_commit",
        "after_effect_before_result",
        "after_result_commit",
    )
    plain = [seq for seq in WORKFLOW_STEPS if seq not in (6, 8, 9)]
    return [
        *(Target(point, 0) for point in ("claim_committed", "lease_renew", "before_finish")),
        *(Target(point, seq) for point in step_points for seq in plain),
        *(
            Target(point, seq)
            for point in ("before_intent_commit", "after_result_commit")
            for seq in (6, 8, 9)
        ),
        Target("wait_recorded", 6),
        Target("wait_recorded", 9),
        Target("cancel_seen", 0),
    ]
