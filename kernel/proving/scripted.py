"""The crash sweep's workloads: small programs made of a seeded list of operations, each one a
way a run can step (a model call, a read, an idempotent write, non-idempotent writes with and
without a probe, parallel reads, reads planned by the step before them, a child spawned and
joined, an owner's answer, a timer, a checkpoint).

Everything a script returns is deterministic (no run ids, no times), so a run crashed at any
point and resumed must end with exactly the output of the run that never crashed.

The apps above the kernel add operations of their own (`EXTRA_OPS`: the tool harness's calls,
registered by `missions.proving.sweep_harness`): the kernel cannot import them. They are drawn
only by workloads from `EXTRA_SEEDS` on, so every other seed keeps its operations.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from kernel.context import Done, ReadStep, RunContext, StepCall
from kernel.models import Effect, RunStatus, StepKind
from kernel.programs import Outcome
from kernel.proving.chaos import blind_append, fake_model, idempotent_put, probe

PROGRAM = "sweep.script"
# Workloads from this seed on draw one of `EXTRA_OPS` too; far above the seeds `manage.py chaos`
# picks, so that the seeds before it name the same operations with or without extensions.
EXTRA_SEEDS = 1_000_000_000
EXTRA_EVERY = 4  # with extensions, one workload of every four regular ones has a twin with one


def _read(call: StepCall) -> Done:
    return Done({"value": call.request["n"] * 2})


def _model(ctx: RunContext, index: int) -> Any:
    return ctx.step(
        StepKind.MODEL_CALL,
        effect=Effect.MODEL_CALL,
        name="fake-model",
        request={"prompt": f"op {index}"},
        execute=fake_model,
    )


def _read_step(ctx: RunContext, index: int) -> Any:
    return ctx.step(
        StepKind.TOOL_CALL, effect=Effect.READ, name="read", request={"n": index}, execute=_read
    )


def _put(ctx: RunContext, index: int) -> Any:
    return ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.IDEMPOTENT_WRITE,
        name="ledger.put",
        request={"value": index},
        execute=idempotent_put,
    )


def _send(ctx: RunContext, index: int) -> Any:
    """Non-idempotent, with a probe that finds an earlier application."""
    return ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.NON_IDEMPOTENT,
        name="ledger.send",
        request={"value": index},
        execute=blind_append,
        probe=probe,
    )


def _pay(ctx: RunContext, index: int) -> Any:
    """Non-idempotent without a probe: a crash after its intent asks the owner."""
    return ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.NON_IDEMPOTENT,
        name="ledger.pay",
        request={"value": index},
        execute=blind_append,
    )


def _parallel(ctx: RunContext, index: int) -> Any:
    return ctx.parallel(
        [ReadStep(StepKind.TOOL_CALL, "read", {"n": index * 10 + i}, _read) for i in range(3)]
    )


def _planned(ctx: RunContext, index: int) -> Any:
    """A model call naming the read that follows it: that read's intent commits with its result."""
    request = {"n": index, "planned": True}
    text = ctx.step(
        StepKind.MODEL_CALL,
        effect=Effect.MODEL_CALL,
        name="fake-model",
        request={"prompt": f"plan {index}"},
        execute=fake_model,
        then=lambda result: [(StepKind.TOOL_CALL, "read", request)],
    )
    read = ctx.step(
        StepKind.TOOL_CALL, effect=Effect.READ, name="read", request=request, execute=_read
    )
    return [text, read]


def _child(ctx: RunContext, index: int) -> Any:
    child = ctx.spawn("chaos.child", {"n": index})
    return [(entry["status"], entry["output"]) for _, entry in sorted(ctx.join([child]).items())]


def _ask(ctx: RunContext, index: int) -> Any:
    return ctx.wait_human({"approve": f"op {index}"}, expires_in=timedelta(hours=1))


def _sleep(ctx: RunContext, index: int) -> Any:
    ctx.sleep(timedelta(0))  # due at once: expired by the step itself, no suspension
    return "fired"


def _checkpoint(ctx: RunContext, index: int) -> Any:
    return ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name="checkpoint",
        request={"n": index},
        execute=lambda call: Done({"saved": True}),
    )


OPS: dict[str, Callable[[RunContext, int], Any]] = {
    "model": _model,
    "read": _read_step,
    "put": _put,
    "send": _send,
    "pay": _pay,
    "parallel": _parallel,
    "planned": _planned,
    "child": _child,
    "ask": _ask,
    "sleep": _sleep,
    "checkpoint": _checkpoint,
}
# Operations of the apps above the kernel, by name, registered by them (`EXTRA_SEEDS`).
EXTRA_OPS: dict[str, Callable[[RunContext, int], Any]] = {}


def script(ctx: RunContext) -> Outcome:
    ops = {**OPS, **EXTRA_OPS}
    return Outcome(
        RunStatus.DONE, [ops[op](ctx, index) for index, op in enumerate(ctx.input["ops"])]
    )


def ops_of(seed: int) -> list[str]:
    """The operations of workload `seed`: two to five, any kind, reads and writes mixed; from
    `EXTRA_SEEDS` on (with extensions registered), one of them an extension's."""
    rng = random.Random(seed)  # noqa: S311  # reproducible workloads, not secrets
    names = sorted(OPS)
    if seed < EXTRA_SEEDS or not EXTRA_OPS:
        return rng.choices(names, k=rng.randint(2, 5))
    ops = rng.choices(names, k=rng.randint(1, 4))
    ops.insert(rng.randint(0, len(ops)), rng.choice(sorted(EXTRA_OPS)))
    return ops


def seeds(first: int) -> Iterator[int]:
    """The sweep's workloads from `first`: `first`, `first + 1`, ...; with extensions
    registered, every `EXTRA_EVERY`-th followed by its twin `EXTRA_SEEDS + n`, which draws an
    extension's operation. From `EXTRA_SEEDS` on, every workload draws one."""
    for seed in itertools.count(first):
        yield seed
        if EXTRA_OPS and seed < EXTRA_SEEDS and seed % EXTRA_EVERY == 0:
            yield EXTRA_SEEDS + seed
