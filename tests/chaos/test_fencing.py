"""A worker paused past its lease (SIGSTOP) can write nothing once it resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from agentos.core import database
from kernel.models import Event, Run, Step
from tests.kernel.factories import start
from tests.polling import wait_for
from tests.processes import stop

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


def worker(tmp_path: Path, *, lease: float, log: Path | None = None) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": str(tmp_path),
    }
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "proving_worker",
            "--lease",
            str(lease),
            "--poll",
            "0.2",
        ],
        env=env,
        stderr=log.open("wb") if log else None,
    )


def test_it_fences_out_a_worker_paused_past_its_lease(tmp_path: Path) -> None:
    run = start("chaos.busy", {"seconds": 3})
    zombie_log = tmp_path / "zombie.log"
    paused = worker(tmp_path, lease=1, log=zombie_log)
    taker = None
    try:
        wait_for(
            lambda: Step.objects.filter(run=run).exists(),
            timeout=30,
            message="the first worker to start the step",
        )
        paused.send_signal(signal.SIGSTOP)
        # The lease runs out (by the database's clock, which judges it): what the test is about.
        wait_for(
            lambda: Run.objects.filter(pk=run.pk, lease_expires_at__lt=Now()).exists(),
            timeout=30,
            message="the paused worker's lease to run out",
        )

        taker = worker(tmp_path, lease=30)
        wait_for(
            lambda: Run.objects.get(pk=run.pk).fence == 2,
            timeout=30,
            message="the second worker to take the run over",
        )
        paused.send_signal(signal.SIGCONT)  # it finishes its sleep and tries to write
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == "done",
            timeout=30,
            message="the run to end",
        )
        # The zombie's write is refused after the run ended: wait for its attempt, then look.
        wait_for(
            lambda: f"run {run.pk}: lease lost" in zombie_log.read_text(),
            timeout=30,
            message="the zombie to try to write its result",
        )
    finally:
        for process in (paused, taker):
            if process is not None:
                process.send_signal(signal.SIGCONT)
                stop(process)

    run.refresh_from_db()
    step = Step.objects.get(run=run)
    assert taker is not None
    assert isinstance(step.result, dict)
    assert isinstance(run.output, dict)
    assert step.executions == 1
    assert step.result["pid"] == taker.pid  # the zombie's result never landed
    assert run.output["pid"] == taker.pid
    assert Event.objects.filter(run_id=run.pk, kind="run.finished").count() == 1
    assert f"run {run.pk}: lease lost" in zombie_log.read_text()  # it did try, and was refused


def test_it_refuses_a_fenced_effect_of_a_worker_that_lost_its_lease() -> None:
    from kernel import leases, scheduler
    from kernel.exceptions import LeaseLost
    from kernel.models import ChaosEffect

    run = start("chaos.noop")
    stale = scheduler.claim_next_run(worker="a", lease_seconds=30)
    assert stale is not None
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)
    fresh = scheduler.claim_next_run(worker="b", lease_seconds=30)
    assert fresh is not None

    with pytest.raises(LeaseLost), leases.fenced(stale.fence):
        ChaosEffect.objects.create(key="k", run_id_value=run.pk, seq=1, effect="x")
    with leases.fenced(fresh.fence):
        ChaosEffect.objects.create(key="k", run_id_value=run.pk, seq=1, effect="x")

    assert ChaosEffect.objects.count() == 1
