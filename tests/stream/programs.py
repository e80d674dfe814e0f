"""Programs the stream tests run through a real worker."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from kernel.budgets import Cost
from kernel.context import Done, RunContext, StepCall
from kernel.models import Effect, StepKind
from kernel.programs import PROGRAMS, Outcome

# Slow steps with `"gate": true` wait here (at most 30 s) until a test opens it.
GATE = threading.Event()


def story(ctx: RunContext) -> Outcome:
    """A model answer, a failing tool call, `steps` slow steps (the gated one first), a
    question if asked, and as many steps again after the answer."""
    ctx.step(
        StepKind.MODEL_CALL,
        effect=Effect.MODEL_CALL,
        name="m",
        request={"turn": 1},
        execute=lambda call: Done(
            {"text": "Looking.", "reasoning": "", "items": []},
            Cost(input_tokens=12, output_tokens=3, usd_micros=40),
        ),
    )
    ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.READ,
        name="read_file",
        request={"path": "nowhere"},
        execute=lambda call: Done({"output": "no such file", "is_error": True}),
    )
    pause = float(ctx.input.get("pause", 0))

    def slow(call: StepCall) -> Done:
        if call.request.get("gated"):
            GATE.wait(30)
        time.sleep(pause)
        return Done({"ok": True})

    for index in range(int(ctx.input.get("steps", 0))):
        ctx.step(
            StepKind.CHECKPOINT,
            # An effect: its start is announced (a read is announced once, done).
            effect=Effect.IDEMPOTENT_WRITE,
            name=f"slow {index}",
            request={"i": index, "gated": bool(ctx.input.get("gate")) and index == 0},
            execute=slow,
        )
    if ctx.input.get("ask"):
        answer = ctx.wait_human(
            ctx.input.get(
                "question", {"type": "question", "text": "Go on?", "choices": ["yes", "no"]}
            ),
            expires_in=timedelta(days=1),
        )
        for index in range(int(ctx.input.get("steps", 0))):
            ctx.step(
                StepKind.CHECKPOINT,
                effect=Effect.READ,
                name=f"after {index}",
                request={"i": index, "answer": answer},
                execute=slow,
            )
    return Outcome(output="told")


PROGRAMS.add("test.stream.story", story)
