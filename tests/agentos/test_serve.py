"""`manage.py serve` (what `make run` starts): web server and workers under one process group."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from django.core.management import CommandError, call_command

from agentos import processes
from agentos.core import tokens
from agentos.core.owner import get_owner
from agentos.processes import Child, ProcessGroup
from tests.live import running_stack

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)",
]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def group_of(*children: Child, clock: FakeClock) -> ProcessGroup:
    return ProcessGroup(
        children=list(children), env={}, ready_url="http://127.0.0.1:9/", _clock=clock
    )


def test_it_restarts_a_dead_child_after_a_growing_backoff() -> None:
    clock = FakeClock()
    child = Child("quitter", [sys.executable, "-c", "pass"])
    tending = group_of(child, clock=clock)
    child.start({}, clock.now)
    assert child.process is not None
    child.process.wait()

    assert tending.tend_one() is True  # restart scheduled in 1 s
    assert tending.tend_one() is False  # not yet
    clock.now += 1
    assert tending.tend_one() is True
    assert child.restarts == 1
    assert child.process is not None
    child.process.wait()

    assert tending.tend_one() is True  # scheduled again, now 2 s later
    clock.now += 1
    assert tending.tend_one() is False
    clock.now += 1
    assert tending.tend_one() is True
    assert child.restarts == 2
    tending.stop_all()


def test_it_resets_the_backoff_of_a_child_that_ran_long(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    child = Child("quitter", [sys.executable, "-c", "pass"], backoff=16.0)
    tending = group_of(child, clock=clock)
    child.start({}, clock.now - processes.STABLE_AFTER)
    assert child.process is not None
    child.process.wait()

    tending.tend_one()

    assert child.restart_at == clock.now + 1.0


def test_it_stops_children_and_kills_those_that_ignore_the_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "STOP_TIMEOUT", 1.0)
    polite = Child("polite", SLEEPER)
    stubborn = Child("stubborn", STUBBORN)
    tending = group_of(polite, stubborn, clock=FakeClock())
    polite.start({}, 0.0)
    stubborn.process = subprocess.Popen(STUBBORN, stdout=subprocess.PIPE, start_new_session=True)
    assert stubborn.process.stdout is not None
    assert stubborn.process.stdout.readline() == b"ready\n"  # its SIGTERM handler is in place

    tending.stop_all()

    assert polite.process is not None
    assert polite.process.returncode == -signal.SIGTERM
    assert stubborn.process.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "0"], "--port must be between 1 and 65535, not 0."),
        (["--workers", "0"], "--workers must be at least 1."),
    ],
)
def test_it_refuses_bad_arguments(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("serve", *argv)


def test_it_refuses_a_busy_port_before_starting_anything(db: None) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(CommandError, match=f"Cannot listen on 127.0.0.1:{port}"):
            call_command("serve", "--port", str(port))


@pytest.mark.django_db(transaction=True)
def test_it_takes_its_children_down_when_killed(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        stack.wait_for_workers()
        children = psutil.Process(stack.process.pid).children(recursive=True)
        assert len(children) >= 3  # daphne, huey consumer, its worker process

        stack.process.kill()  # kill -9: no chance to stop anything itself
        stack.process.wait()
        _gone, alive = psutil.wait_procs(children, timeout=20)

    assert alive == [], f"orphans survived their process group: {alive}"


@pytest.mark.django_db(transaction=True)
def test_it_serves_web_and_workers_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        report = stack.wait_for_workers()
        assert report["database"]["state"] == "up", stack.log()
        assert report["workers"]["state"] == "up", stack.log()
        assert report["status"] == "ok"
        port = int(stack.url.rsplit(":", 1)[1])
        refused = invalid_body_over_http(port)

    assert stack.process.returncode == 0, stack.log()
    assert "agentos owner account created" in stack.log()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, "the web server outlived its group"
    # The status line as daphne writes it: the phrase is the standard one, not "Unknown Status".
    assert (refused.status, refused.reason) == (422, "Unprocessable Entity")


def invalid_body_over_http(port: int) -> http.client.HTTPResponse:
    """POST /api/v1/projects with a body off the schema, by the owner's token, on the wire."""
    owner = get_owner()
    assert owner is not None
    secret = tokens.create_token(owner=owner, name="status line").secret
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            "POST",
            "/api/v1/projects",
            body="{}",
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    return response
