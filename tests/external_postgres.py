"""A PostgreSQL of the owner's, as `DATABASE_URL` reaches one: a second server made from
pgserver's bundled binaries (`initdb`, `pg_ctl`, the pgvector extension it ships), listening on
127.0.0.1 only (no unix socket: nothing reaches it but over TCP), with SCRAM-SHA-256 passwords.
Its password holds characters a URL must escape, so URL parsing is under test too."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
from pgserver._commands import POSTGRES_BIN_PATH

from tests.live import free_port


@dataclass
class Server:
    port: int
    user: str
    password: str
    root: Path
    running: bool = False

    def url(self, database: str) -> str:
        return (
            f"postgresql://{self.user}:{quote(self.password, safe='')}"
            f"@127.0.0.1:{self.port}/{database}"
        )

    def start(self) -> None:
        """Start it; the first start creates the empty database `agentos`."""
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories=''"
            " -c password_encryption=scram-sha-256 -c fsync=off"
        )
        pgdata, log = str(self.root / "pg"), str(self.root / "log")
        _run(_binary("pg_ctl"), "-D", pgdata, "-w", "-o", options, "-l", log, "start")
        self.running = True
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            if not admin.execute("SELECT 1 FROM pg_database WHERE datname = 'agentos'").fetchone():
                admin.execute("CREATE DATABASE agentos")

    def stop(self) -> None:
        if self.running:
            _run(_binary("pg_ctl"), "-D", str(self.root / "pg"), "-m", "fast", "-w", "stop")
            self.running = False


def _binary(name: str) -> str:
    return str(Path(POSTGRES_BIN_PATH) / name)


def _postgres_user() -> str | None:
    # PostgreSQL refuses to run as root; pgserver runs it as its own `pgserver` user then.
    return "pgserver" if os.geteuid() == 0 else None


def _run(*argv: str) -> None:
    done = subprocess.run(  # pgserver's bundled binaries
        argv, capture_output=True, text=True, check=False, user=_postgres_user()
    )
    assert done.returncode == 0, f"{Path(argv[0]).name} failed: {done.stdout}{done.stderr}"


@contextlib.contextmanager
def tcp_postgres(port: int | None = None, *, start: bool = True) -> Iterator[Server]:
    """A fresh PostgreSQL for 127.0.0.1:`port` (a free one by default), password required,
    started (unless not `start`: `Server.start` then) with an empty database `agentos`; stopped
    and removed on the way out."""
    root = Path(tempfile.mkdtemp(prefix="agentos-external-pg-"))
    server = Server(
        port=port or free_port(),
        user="agentos",
        password=secrets.token_urlsafe(12) + "@:/%",
        root=root,
    )
    pwfile = root / "password"
    pwfile.write_text(server.password)
    if os.geteuid() == 0:
        shutil.chown(root, "pgserver")
        shutil.chown(pwfile, "pgserver")
    try:
        _run(_binary("initdb"), "-D", str(root / "pg"), "-U", server.user, f"--pwfile={pwfile}",
             "--auth=scram-sha-256", "-E", "UTF8", "--no-sync")  # fmt: skip
        pwfile.unlink()
        if start:
            server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
