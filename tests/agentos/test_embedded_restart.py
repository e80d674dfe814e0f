"""`manage.py serve` without `DATABASE_URL` owns its embedded PostgreSQL: killed outright, the
server is started again, the workers find it back, and it still stops when serve does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from tests.chaos.test_database_restart import postmaster_pid
from tests.live import Stack, free_port
from tests.polling import wait_for

pytestmark = [pytest.mark.serial, pytest.mark.timeout(300)]


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent (a stopped server's pid may linger so)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_serve_starts_its_embedded_database_again_when_it_dies(tmp_path: Path) -> None:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "AGENTOS_DATA_DIR": str(tmp_path / "data"),
        "PYTHONUNBUFFERED": "1",
    }
    environment.pop("DATABASE_URL", None)
    environment.pop("AGENTOS_PG_KEEP_RUNNING", None)
    pgdata = tmp_path / "data" / "pg"
    web_port = free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(web_port), "--workers", "1",
         "--no-demo"],
        cwd=settings.BASE_DIR, env=environment, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    stack = Stack(url=f"http://127.0.0.1:{web_port}", process=process)
    threading.Thread(target=stack.pump, daemon=True).start()
    restarted = None
    try:
        assert stack.ready.wait(timeout=180), stack.log()
        stack.wait_for_workers(timeout=90)
        killed = postmaster_pid(pgdata)
        assert killed is not None
        os.kill(killed, signal.SIGKILL)  # out of memory, or a stray kill

        def back() -> int | None:
            # Serve says so once the server is its own again (stopped when serve exits).
            if "the embedded database is running again" not in "".join(stack.output):
                return None
            pid = postmaster_pid(pgdata)
            if pid in (None, killed) or not alive(pid):
                return None
            return pid if stack.health()["database"]["state"] == "up" else None

        restarted = wait_for(back, timeout=120, message="the database to run again")
        stack.wait_for_workers(timeout=90)
        assert process.poll() is None, stack.log()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if restarted is not None:
            try:
                wait_for(lambda: not alive(restarted), timeout=15, message="the database to stop")
            except pytest.fail.Exception:
                os.kill(restarted, signal.SIGTERM)  # leave nothing behind, even on failure
                raise
    log = "".join(stack.output)
    assert log.count("the embedded database stopped; starting it again") == 1, log
    assert "the embedded database is running again" in log
    assert "restarting in" not in log, log  # no child of serve died of it
