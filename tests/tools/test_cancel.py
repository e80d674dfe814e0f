"""Cancelling a run kills its sandbox: the whole process tree, at once."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from cluster.sandbox import identity
from kernel import runs
from kernel.models import Run, Step
from kernel.worker import Worker
from missions.models import Mission
from tests.polling import wait_for
from tests.processes import worker_thread
from tests.tools.conftest import FINISH, calls
from tools.builtin import CODING_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)


def sandbox_processes(run_id: int) -> list[str]:
    found = subprocess.run(
        ["pgrep", "-u", str(identity(run_id)[0]), "-a"], capture_output=True, text=True, check=False
    )
    return found.stdout.splitlines()


def test_stopping_a_run_kills_its_running_command_and_children(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    run = runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": "Wait a long time.",
            "provider": "scripted",
            "model": "scripted",
            "tools": CODING_TOOLS,
            "script": {
                "turns": [calls(("shell", {"command": "sleep 300 & sleep 301; wait"})), FINISH]
            },
            "repository": str(repo),
        },
    )
    worker = threading.Thread(target=Worker(lease_seconds=2).run_until_idle)
    worker.start()
    wait_for(
        lambda: any("sleep 301" in line for line in sandbox_processes(run.pk)),
        timeout=30,
        message="the command to start",
        interval=0.05,
    )
    asked = time.monotonic()
    runs.request_stop(run.pk)
    worker.join(timeout=30)
    assert not worker.is_alive()

    assert Run.objects.get(pk=run.pk).status == "cancelled"
    assert time.monotonic() - asked < 5
    assert not [line for line in sandbox_processes(run.pk) if "sleep 30" in line]
    shell = Step.objects.get(run=run, name="shell")
    assert shell.result is None or "[cancelled]" in shell.result["output"]


def test_a_stop_kills_the_sandbox_within_a_second_of_the_request(
    hostile_mission: tuple[Mission, Path],
) -> None:
    """The stop reaches the worker by the database's notification, not a lease renewal (every
    10 s with this 30 s lease): the command's processes are gone within a second."""
    mission, repo = hostile_mission
    run = runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": "Wait a long time.",
            "provider": "scripted",
            "model": "scripted",
            "tools": CODING_TOOLS,
            "script": {"turns": [calls(("shell", {"command": "sleep 302"})), FINISH]},
            "repository": str(repo),
        },
    )
    with worker_thread():
        wait_for(
            lambda: any("sleep 302" in line for line in sandbox_processes(run.pk)),
            timeout=30,
            message="the command to start",
            interval=0.05,
        )
        runs.request_stop(run.pk)
        asked = time.monotonic()
        # A second, and a quarter for a loaded two-core machine (pgrep itself takes time).
        wait_for(
            lambda: not [line for line in sandbox_processes(run.pk) if "sleep 302" in line],
            timeout=1.25,
            message="the sandbox to go within a second of the stop",
        )
        wait_for(
            lambda: Run.objects.get(pk=run.pk).is_terminal,
            timeout=asked + 1.25 - time.monotonic(),
            message="the run to end within a second of the stop",
        )
    assert Run.objects.get(pk=run.pk).status == "cancelled"
