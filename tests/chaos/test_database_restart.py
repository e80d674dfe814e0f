"""A command that stopped the embedded database abruptly and restarted it (as `make chaos`
does) stops the restarted server when it exits: no PostgreSQL is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

# Above the 120 s its restarting process may take, so that its own failure is the one reported.
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]

RESTART = (
    "from agentos.core import database; database.crash_and_restart_embedded(); print('restarted')"
)


def postmaster_pid(pgdata: Path) -> int | None:
    pidfile = pgdata / "postmaster.pid"
    return int(pidfile.read_text().split()[0]) if pidfile.exists() else None


def running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_it_stops_the_restarted_embedded_database_when_the_command_exits(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="agentos.settings",
        AGENTOS_DATA_DIR=str(tmp_path),
        AGENTOS_PG_KEEP_RUNNING="0",
    )
    done = subprocess.run(  # its own embedded server, in its own data dir
        [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "shell", "-c", RESTART],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    pid = postmaster_pid(tmp_path / "pg")
    try:
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        assert b"restarted" in done.stdout
        assert not running(pid), "the restarted PostgreSQL outlived the command"
    finally:
        if pid is not None and running(pid):
            os.kill(pid, 15)  # leave nothing behind even when the test fails
