"""A one-shot process that ran an agent run exits at once: nothing sent to the channel layer
at interpreter shutdown waits on an event loop that never started."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from agentos.core import database

pytestmark = pytest.mark.django_db(transaction=True)

# The deltas sender is kept busy for a second, so the model step's deltas are sent while the
# interpreter exits (what a short script does when its run ends right after the model's answer).
SCRIPT = """
import time
import django
django.setup()
from kernel import runs
from kernel.worker import Worker
from missions.engine import deltas
from tests.kernel.factories import make_mission
deltas._sender.submit(time.sleep, 1.0)
runs.start_run(
    account=make_mission(),
    program="agent",
    input={"goal": "Say hi.", "provider": "scripted", "model": "scripted",
           "script": {"turns": [{"text": "Hi."}]}},
)
print(Worker(lease_seconds=30).run_until_idle(), flush=True)
"""


def test_it_exits_within_seconds_after_running_an_agent_run(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",  # doorbells and deltas in the background
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": str(tmp_path),
    }
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the run is over
        ran = time.monotonic()
        process.wait(timeout=30)
        exited = time.monotonic() - ran
    finally:
        process.kill()
        _out, errors = process.communicate(timeout=10)

    assert line.strip() == b"['done']", errors.decode()[-3000:]
    assert process.returncode == 0, errors.decode()[-3000:]
    assert exited < 5, f"exited {exited:.1f} s after its run ended"


def test_it_never_waits_on_a_loop_whose_thread_could_not_start(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from kernel import bus

    settings.DOORBELLS_IN_BACKGROUND = True
    monkeypatch.setattr(bus, "_loop", None)
    monkeypatch.setattr(bus, "_loop_thread", None)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)

    async def send() -> str:
        return "sent"

    started = time.monotonic()
    for _ in range(2):  # the second call is the one that used to wait a minute
        with pytest.raises(bus.ShuttingDown):
            bus.layer_call(send)
    assert time.monotonic() - started < 1
    assert bus._loop is None
