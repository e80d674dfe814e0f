"""A tool that meets a full disk has not failed: its step waits for space (`kernel.diskfull`)
and runs again, instead of telling the model the tool broke; any other tool error still goes
back to the model as the tool's answer."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from django.utils import timezone

from kernel.context import RunContext
from kernel.models import Effect, Run, RunStatus, StepKind, Wait, WaitState
from kernel.programs import PROGRAMS, Outcome
from kernel.worker import Worker
from missions.engine import harness
from tests.kernel.factories import start
from tools.base import Risk, Tool, ToolEnv, ToolError, Worksite

pytestmark = pytest.mark.django_db

FAILURES: list[int] = []  # the errno of each coming attempt, then it works


def _write(env: ToolEnv, arguments: dict[str, Any]) -> str:
    if FAILURES:
        code = FAILURES.pop(0)
        try:
            raise OSError(code, "refused")
        except OSError as error:
            raise ToolError(f"cannot write the file: {error.strerror}.") from None
    return "written"


WRITER = Tool(
    name="note_down",
    description="Writes a note.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    effect=Effect.READ,  # runs at level 0, in no sandbox: only the harness's path is tested
    risk=Risk.READ,
    run=_write,
)


def writer(ctx: RunContext) -> Outcome:
    call = {"name": WRITER.name, "call_id": "c1", "arguments": {}}
    worksite = Worksite(run_id=ctx.run_id, project_id=None, workspace=None, sandbox_level=0)
    execute = harness._executor(call, WRITER, {WRITER.name: WRITER}, ctx.run, worksite, None, None)
    done = ctx.step(
        StepKind.TOOL_CALL, effect=WRITER.effect, name=WRITER.name, request=call, execute=execute
    )
    return Outcome(output=done)


PROGRAMS.add("test.note_writer", writer)


def test_a_tool_that_meets_a_full_disk_waits_for_space_then_runs_again() -> None:
    FAILURES[:] = [errno.ENOSPC]
    run = start("test.note_writer")
    worker = Worker(lease_seconds=30)

    assert worker.run_until_idle() == ["waiting"]

    hold = Wait.objects.get(run=run)
    assert hold.state == WaitState.OPEN
    assert "disk_full" in hold.question
    Wait.objects.filter(pk=hold.pk).update(due_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(runnable_at=timezone.now())
    assert worker.run_until_idle() == ["done"]
    run.refresh_from_db()
    assert run.output == {"output": "written", "is_error": False}


def test_any_other_tool_error_is_the_tools_answer() -> None:
    FAILURES[:] = [errno.EACCES]
    run = start("test.note_writer")

    assert Worker(lease_seconds=30).run_until_idle() == ["done"]

    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    assert run.output == {"output": "cannot write the file: refused.", "is_error": True}
