from __future__ import annotations

import pytest

from kernel.models import Run, Wait, WaitState
from kernel import runs
from kernel.worker import Worker
from tests.kernel.factories import start

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_runs_the_chaos_workflow_to_done() -> None:
    run = start("chaos.workflow", {"n": 3, "timer_seconds": 0})
    worker = Worker(lease_seconds=30)
    outcomes = worker.run_until_idle()
    print(outcomes)
    for wait in Wait.objects.filter(state=WaitState.OPEN):
        runs.answer_wait(wait.pk, answer={"approve": True})
    print(worker.run_until_idle())
    run.refresh_from_db()
    print(run.status, run.error, run.output)
    assert run.status == "done"
