"""The crash sweep's workloads: small programs made of a seeded list of operations, each one a
way a run can step (a model call, a read, an idempotent write, non-idempotent writes with and
without a probe, parallel reads, reads planned by the step before them, a child spawned and
joined, an owner's answer, a timer, a checkpoint).

Everything a script returns is deterministic (no run ids, no times), so a run crashed at any
point and resumed must end with exactly the output of the run that never crashed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kernel.context import Done, ReadStep, RunContext, StepCall
from kernel.models import Effect, RunStatus, StepKind
from kernel.programs import Outcome
from kernel.proving.chaos import blind_append, fake_model, idempotent_put, probe

PROGRAM = "sweep.script"


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


def script(ctx: RunContext) -> Outcome:
    return Outcome(
        RunStatus.DONE, [OPS[op](ctx, index) for index, op in enumerate(ctx.input["ops"])]
    )


def ops_of(seed: int) -> list[str]:
    """The operations of workload `seed`: two to five, any kind, reads and writes mixed."""
    rng = random.Random(seed)  # noqa: S311  # reproducible workloads, not secrets
    names = sorted(OPS)
    return rng.choices(names, k=rng.randint(2, 5))
