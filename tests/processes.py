"""The processes a test starts: Django scripts on the test database, a worker loop in a thread,
and stopping whatever a test started, whatever state it is in."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping

from django.conf import settings
from django.db import connection

from agentos.core import database
from kernel.worker import Worker


def run_django(
    script: str,
    *,
    env: Mapping[str, str] | None = None,
    check: bool = False,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter with Django set up on this test's database (`env`
    instead of this process's environment, if given); its output captured as text."""
    environment = {
        **(os.environ if env is None else env),
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(connection.settings_dict),
    }
    return subprocess.run(
        [sys.executable, "-c", "import django\ndjango.setup()\n" + script],
        env=environment,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


@contextlib.contextmanager
def worker_thread(*, lease_seconds: float = 30.0, max_runs: int = 2) -> Iterator[Worker]:
    """A worker loop (doorbell included) in a thread of this process, stopped on the way out;
    a loop that does not stop within 30 s fails the test."""
    loop = Worker(lease_seconds=lease_seconds, poll_seconds=0.5, max_runs=max_runs)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.stopping.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the worker loop did not stop"


def stop(process: subprocess.Popen[bytes], *, grace: float = 15) -> None:
    """Ask `process` to stop, and kill it if it has not within `grace` seconds: a worker left
    running would claim the runs of the tests after it and hold locks their flush needs."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)
