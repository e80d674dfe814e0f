"""The kernel loop runs inside the real huey worker pool that `make run` starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel import runs
from kernel.models import Run, Wait, WaitKind
from tests.kernel.factories import start
from tests.live import running_stack
from tests.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_runs_a_workflow_on_the_huey_pool_and_resumes_it_when_the_owner_answers(
    tmp_path: Path,
) -> None:
    with running_stack(tmp_path, workers=2) as stack:
        stack.wait_for_workers()
        run = start("chaos.workflow", {"n": 2, "timer_seconds": 0.2})

        wait_for(
            lambda: Wait.objects.filter(run=run, kind=WaitKind.HUMAN).exists(),
            timeout=60,
            message="the run to ask the owner",
            interval=0.05,
        )
        runs.answer_wait(Wait.objects.get(run=run, kind=WaitKind.HUMAN).pk, answer="go")
        wait_for(
            lambda: Run.objects.get(pk=run.pk).is_terminal,
            timeout=60,
            message="the run to end",
            interval=0.05,
        )

    run.refresh_from_db()
    assert run.status == "done", (run.error, stack.log())
    assert isinstance(run.output, dict)
    assert run.output["owner"] == {"answer": "go"}
    assert run.children.get().status == "done"
