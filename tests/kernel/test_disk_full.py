"""A step that meets a full disk waits and is tried again, instead of failing its run; nothing
journaled is lost and the step is journaled once.

The disk is a real one: a tiny tmpfs mounted for the test (root only), filled to the last byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_django.fixtures import Settings

from kernel.context import RunContext
from kernel.models import Effect, RunStatus, Step, StepKind, Wait, WaitKind, WaitState
from kernel.programs import PROGRAMS, Outcome
from kernel.steps import Done, StepCall
from kernel.worker import Worker
from tests.disks import fill, needs_root, tiny_disk
from tests.kernel.factories import start
from tests.polling import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_root,
]


def report_writer(ctx: RunContext) -> Outcome:
    """One idempotent write of a report file to the directory the input names."""

    def write(call: StepCall) -> Done:
        target = Path(call.request["directory"]) / f"report-{call.idempotency_key}.txt"
        target.write_text("the report\n" * 200)
        return Done({"written": target.name})

    written = ctx.step(
        StepKind.TOOL_CALL,
        effect=Effect.IDEMPOTENT_WRITE,
        name="write_report",
        request={"directory": ctx.input["directory"]},
        execute=write,
    )
    return Outcome(output=written)


PROGRAMS.add("test.report_writer", report_writer)


def test_a_step_that_meets_a_full_disk_waits_and_is_tried_again(
    tmp_path: Path, settings: Settings
) -> None:
    settings.KERNEL_DISK_FULL_RETRY_SECONDS = 0.3
    worker = Worker(name="test-worker", lease_seconds=30)
    with tiny_disk(tmp_path / "disk") as disk:
        filler = fill(disk)
        run = start("test.report_writer", {"directory": str(disk)})

        assert worker.run_until_idle() == ["waiting"]
        run.refresh_from_db()
        assert run.status == RunStatus.WAITING
        hold = Wait.objects.get(run=run, kind=WaitKind.TIMER)
        assert hold.state == WaitState.OPEN
        assert "No space left on device" in hold.question["disk_full"]["error"]
        step = Step.objects.get(run=run, seq=1)
        assert step.finished_at is None  # its intent is kept, without a result

        # Still full when it is due: it waits again, longer.
        wait_for(lambda: worker.run_until_idle() == ["waiting"], timeout=10, message="a retry")
        hold.refresh_from_db()
        assert hold.question["disk_full"]["holds"] == 2

        filler.unlink()  # the owner frees space
        wait_for(lambda: worker.run_until_idle() == ["done"], timeout=10, message="the run")

    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    assert isinstance(run.output, dict)
    assert run.output["written"].startswith("report-")
    assert list(Step.objects.filter(run=run).values_list("seq", flat=True)) == [1]
    hold.refresh_from_db()
    assert hold.state == WaitState.EXPIRED  # settled once the step got through
