"""The database stops abruptly mid-mission and comes back seconds later: the product's workers
(`manage.py serve`, huey pool and kernel loop) wait for it without dying or spinning, say so once
each way, and the run ends `done` with each step journaled once and each effect applied once."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.db import DatabaseError, connection

from agentos.core import database
from kernel import runs
from kernel.models import Account, Run, RunStatus, Step
from kernel.proving import chaos, harness
from tests.live import running_stack
from tests.polling import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

DOWN_SECONDS = 6.0
# Step 2 of the workflow is a slow read: the database goes away while it runs.
INPUT = {**harness.WORKFLOW_INPUT, "read_seconds": 3.0}


def fetch(url: str, **headers: str) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers=headers)  # noqa: S310  # our own stack
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def console_says_unreachable(url: str) -> None:
    """Pages, API calls and health answer that the database is unreachable: 503, Retry-After,
    no traceback."""
    # The owner's browser: a session cookie, whose session is in the database.
    status, headers, page = fetch(f"{url}/missions/", Cookie="sessionid=k2lq5xmw8r3t7v9y0a1b")
    assert (status, headers.get("Retry-After")) == (503, "10"), page[-2000:]
    assert "The database is unreachable" in page
    status, headers, body = fetch(f"{url}/api/v1/missions", Authorization="Bearer aos_x")
    assert (status, headers.get("Retry-After")) == (503, "10"), body
    assert json.loads(body)["error"]["code"] == "database_unreachable"
    status, _, body = fetch(f"{url}/api/v1/health")
    assert status == 503, body
    assert json.loads(body)["database"] == {
        "state": "down",
        "detail": "the database is unreachable",
        "since": None,
    }


def act_until_ended(run_id: int, *, timeout: float) -> Run:
    """Answer the run's waits as the chaos owner does until it ends; a database still waking up
    is retried."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            harness.act_as_owner(set())
            run = Run.objects.get(pk=run_id)
        except DatabaseError:
            connection.close()
            time.sleep(0.2)
            continue
        if run.is_terminal:
            return run
        time.sleep(0.1)
    pytest.fail(f"run {run_id} did not end within {timeout:g} s")


def test_it_finishes_a_mission_when_the_database_stops_mid_run_and_returns(
    tmp_path: Path,
) -> None:
    with running_stack(tmp_path, workers=1) as stack:
        stack.wait_for_workers()
        account = Account.objects.create(max_concurrent_runs=4)
        run = runs.start_run(account=account, program="chaos.workflow", input=INPUT)
        wait_for(
            lambda: Step.objects.filter(run=run, seq=2, finished_at__isnull=True).exists(),
            timeout=60,
            message="the slow read to start",
            interval=0.05,
        )
        connection.close()
        database.stop_embedded()
        try:
            stopped = time.monotonic()
            console_says_unreachable(stack.url)
            # The outage itself is what is under test: it lasts, whatever the checks took.
            time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - stopped)))
        finally:
            database.start_embedded()
        ended = act_until_ended(run.pk, timeout=120)
        log = "".join(stack.output)
        assert stack.process.poll() is None, stack.log()

    assert ended.status == RunStatus.DONE, (ended.error, log)
    report = chaos.Report()
    chaos.check([run.pk], expected={run.pk: (RunStatus.DONE, None)}, report=report)
    assert report.violations == [], report.violations
    seqs = list(Step.objects.filter(run=run).values_list("seq", flat=True))
    assert len(seqs) == len(set(seqs)), seqs
    # One line when the database went away and one when it came back, per process (the worker
    # pool's consumer and its worker, the egress service), not one per attempt or per loop.
    went, back = log.count("The database is unreachable ("), log.count("is reachable again")
    assert 1 <= went <= 3, log
    assert 1 <= back <= went, log
    assert log.count("Traceback") == 0, log
    assert "restarting in" not in log, log  # no process of the group died (agentos.processes)
