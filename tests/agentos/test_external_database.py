"""agentos on a PostgreSQL of the owner's (`DATABASE_URL`), reached over TCP with a password,
not the embedded one over its socket: the kernel's tests pass against it.

The server is a second PostgreSQL made from pgserver's bundled binaries (`initdb`, `pg_ctl`, the
pgvector extension it ships), listening on 127.0.0.1 only (no unix socket, so nothing can reach
it but over TCP), on a free port, with SCRAM-SHA-256 passwords. Its password holds characters a
URL must escape, so the URL parsing is under test too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from pgserver._commands import POSTGRES_BIN_PATH

from tests.live import free_port

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


@dataclass(frozen=True)
class Server:
    port: int
    user: str
    password: str

    def url(self, database: str) -> str:
        return (
            f"postgresql://{self.user}:{quote(self.password, safe='')}"
            f"@127.0.0.1:{self.port}/{database}"
        )


def _postgres_user() -> str | None:
    # PostgreSQL refuses to run as root; pgserver runs it as its own `pgserver` user then.
    return "pgserver" if os.geteuid() == 0 else None


def _run(*argv: str) -> None:
    done = subprocess.run(  # pgserver's bundled binaries
        argv, capture_output=True, text=True, check=False, user=_postgres_user()
    )
    assert done.returncode == 0, f"{Path(argv[0]).name} failed: {done.stdout}{done.stderr}"


@contextlib.contextmanager
def tcp_postgres() -> Iterator[Server]:
    """A fresh PostgreSQL on 127.0.0.1:<free port>, password required; removed on the way out."""
    root = Path(tempfile.mkdtemp(prefix="agentos-external-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "pgserver")
    server = Server(port=free_port(), user="agentos", password=secrets.token_urlsafe(12) + "@:/%")
    pwfile = root / "password"
    pwfile.write_text(server.password)
    if os.geteuid() == 0:
        shutil.chown(pwfile, "pgserver")
    pgdata = root / "pg"
    bin_dir = Path(POSTGRES_BIN_PATH)
    try:
        _run(
            str(bin_dir / "initdb"),
            "-D",
            str(pgdata),
            "-U",
            server.user,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--no-sync",
        )
        pwfile.unlink()
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={server.port} -c unix_socket_directories=''"
            " -c password_encryption=scram-sha-256 -c fsync=off"
        )
        _run(
            str(bin_dir / "pg_ctl"),
            "-D",
            str(pgdata),
            "-w",
            "-o",
            options,
            "-l",
            str(root / "log"),
            "start",
        )
        try:
            yield server
        finally:
            _run(str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_kernel_suite_passes_against_a_password_protected_postgres_over_tcp(
    tmp_path: Path,
) -> None:
    with tcp_postgres() as server:
        with psycopg.connect(server.url("postgres"), autocommit=True) as admin:
            admin.execute("CREATE DATABASE agentos")
            # Nothing reaches it without the password: SCRAM, not trust.
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                psycopg.connect(
                    server.url("postgres").replace(quote(server.password, safe=""), "x")
                )
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
