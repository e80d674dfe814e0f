"""agentos on a PostgreSQL of the owner's (`DATABASE_URL`), reached over TCP with a password,
not the embedded one over its socket (`tests.external_postgres`): the kernel's tests pass against
it, and `manage.py serve` waits for it when it starts later than agentos."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings

from tests.external_postgres import tcp_postgres
from tests.live import Stack, free_port
from tests.polling import wait_for

# The kernel's tests that exercise the database the most, within about 90 s: the journal (intents,
# results, fencing, prepared statements), claims (SKIP LOCKED, leases, dead holders), durable
# waits, steering (LISTEN/NOTIFY on a connection of its own, built from the same URL), the
# event log's partitions (DDL) and heartbeats. The whole of tests/kernel takes two minutes and
# more on two shared cores.
SUITE = [
    "tests/kernel/test_journal.py",
    "tests/kernel/test_scheduler.py",
    "tests/kernel/test_runs.py",
    "tests/kernel/test_steer_notifications.py",
    "tests/kernel/test_holders.py",
    "tests/kernel/test_heartbeats.py",
    "tests/kernel/test_steer.py",
    "tests/kernel/test_partitions.py",
]
SUITE_SECONDS = 300
pytestmark = pytest.mark.timeout(SUITE_SECONDS + 60)


def test_the_kernel_suite_passes_against_a_password_protected_postgres_over_tcp(
    tmp_path: Path,
) -> None:
    with tcp_postgres() as server:
        # Nothing reaches it without the password: SCRAM, not trust.
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.url("postgres").replace(quote(server.password, safe=""), "x"))
        environment = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PYTEST_", "DJANGO_SETTINGS_MODULE"))
        }
        environment.update(
            DATABASE_URL=server.url("agentos"),
            AGENTOS_DATA_DIR=str(tmp_path / "data"),
            DJANGO_SETTINGS_MODULE="agentos.settings_test",
        )
        suite = subprocess.run(  # the test suite of this checkout
            [
                sys.executable,
                "-m",
                "pytest",
                *SUITE,
                "-p",
                "no:cacheprovider",
                "-q",
                "-x",
                "--create-db",
            ],
            cwd=settings.BASE_DIR,
            env=environment,
            capture_output=True,
            text=True,
            timeout=SUITE_SECONDS,
            check=False,
        )
        # It ran on that server: pytest-django made its test database there and migrated it.
        with psycopg.connect(server.url("test_agentos")) as test_database:
            (runs,) = test_database.execute("SELECT to_regclass('kernel_run')").fetchone() or (
                None,
            )

    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-3000:]
    assert " passed" in suite.stdout
    assert runs == "kernel_run"


@pytest.mark.serial
def test_serve_waits_for_a_database_that_starts_after_it(tmp_path: Path) -> None:
    port, web_port = free_port(), free_port()
    with tcp_postgres(port=port, start=False) as server:
        environment = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            "DJANGO_SETTINGS_MODULE": "agentos.settings",
            "DATABASE_URL": server.url("agentos"),
            "AGENTOS_DATA_DIR": str(tmp_path / "data"),
            "PYTHONUNBUFFERED": "1",
        }
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(web_port), "--workers", "1",
             "--no-demo"],
            cwd=settings.BASE_DIR, env=environment, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        stack = Stack(url=f"http://127.0.0.1:{web_port}", process=process)
        threading.Thread(target=stack.pump, daemon=True).start()
        try:
            wait_for(
                lambda: "The database is unreachable (start: " in "".join(stack.output),
                timeout=60,
                message="serve to say it waits for the database",
            )
            assert process.poll() is None, stack.log()
            server.start()
            assert stack.ready.wait(timeout=120), stack.log()
            # Up, and its worker on that database too (stopped before it has started, a huey
            # consumer dies of the Ctrl-C with a traceback of its own).
            stack.wait_for_workers()
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # Ctrl-C: serve's graceful stop
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    log = "".join(stack.output)
    # Once, by serve itself: its worker pool's queue reaches the database with the same URL
    # (a %-escaped password included) as soon as it starts.
    assert log.count("The database is unreachable") == 1, log
    assert log.count("The database is unreachable (start: ") == 1, log
    assert "The database is reachable again" in log
    assert "Traceback" not in log
    # The URL's password never shows in what serve printed.
    assert server.password not in log
    assert quote(server.password, safe="") not in log
