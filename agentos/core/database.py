"""Where the database lives: a `DATABASE_URL`, or PostgreSQL embedded through pgserver.

Settings call `database_url()` once per process. The process group of `make run`
(`agentos.processes`) starts the embedded server itself and hands its URL to its children through
`DATABASE_URL`, so only one process owns the server's lifetime and the children never race to
start it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from agentos.core import private

SCHEMES = {"postgres", "postgresql"}


def embedded_url(pgdata: Path, *, stop_on_exit: bool) -> str:
    """Start (or attach to) the embedded server in `pgdata` and return its URL.

    With `stop_on_exit`, pgserver stops the server when the last process that attached to it
    exits; otherwise the server keeps running for the next command.
    """
    # pgserver falls back to a runtime directory for its socket when the data path is too long
    # for a unix socket; without XDG_RUNTIME_DIR, platformdirs warns and guesses one.
    runtime = os.environ.get("XDG_RUNTIME_DIR") or str(
        Path(tempfile.gettempdir()) / f"agentos-runtime-{os.getuid()}"
    )
    os.environ["XDG_RUNTIME_DIR"] = str(private_runtime_dir(Path(runtime)))
    # Imported here: it is heavy and unused when DATABASE_URL is set.
    from pgserver.postgres_server import get_server

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(pgdata, cleanup_mode="stop" if stop_on_exit else None)
    _forget_dead_handles(server)
    info = server.get_postmaster_info()
    # The socket directory is not always the data directory (long paths): read it, never guess.
    return f"postgresql://postgres@/postgres?host={info.socket_dir}&port={info.port or 5432}"


def private_runtime_dir(path: Path) -> Path:
    """The runtime directory, only ours: under a shared /tmp anyone may create that name first,
    then read or replace the database's socket. Created 0700; an existing one is used only if
    it is a real directory (not a symlink) that we own with no access for others."""
    return private.ensure_dir(path)


def _forget_dead_handles(server: Any) -> None:
    """Unregister processes that died without telling pgserver.

    pgserver stops the server when the last registered process exits, but a process killed with
    SIGKILL (or one that skips atexit, like mypy) stays registered, and the server would then
    outlive every later run. Uses pgserver's own lock and handle list.
    """
    with server._lock:
        handles = server.global_process_id_list
        for pid in handles.get():
            if not _alive(pid):
                handles.get_and_remove(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def parse_url(url: str) -> dict[str, Any]:
    """Turn a PostgreSQL URL into a Django `DATABASES` entry.

    Accepts `postgresql://user:password@host:port/name` and the socket form
    `postgresql://user@/name?host=/socket/dir&port=5432`.
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ImproperlyConfigured(
            f"DATABASE_URL must start with postgresql:// (got {parts.scheme or 'no'} scheme)."
        )
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured("DATABASE_URL names no database (postgresql://…/NAME).")
    host = query.pop("host", None) or parts.hostname or ""
    port = query.pop("port", None) or (str(parts.port) if parts.port else "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": port,
        "OPTIONS": query,
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": True,
    }


def build_url(entry: dict[str, Any]) -> str:
    """The inverse of `parse_url`, for handing a (test) database to a child process."""
    auth = quote(entry["USER"] or "")
    if entry.get("PASSWORD"):
        auth += ":" + quote(entry["PASSWORD"])
    query: dict[str, str] = dict(entry.get("OPTIONS") or {})
    netloc = f"{auth}@" if auth else ""
    host = entry.get("HOST") or ""
    if host.startswith("/"):
        query["host"] = host
        if entry.get("PORT"):
            query["port"] = str(entry["PORT"])
    else:
        netloc += host + (f":{entry['PORT']}" if entry.get("PORT") else "")
    suffix = f"?{urlencode(query)}" if query else ""
    return f"postgresql://{netloc}/{quote(entry['NAME'])}{suffix}"


def crash_and_restart_embedded() -> None:
    """Stop the embedded server as a crash would (`-m immediate`, no checkpoint), then restart it.

    For the chaos tests: committed intents and results must survive. Only for the embedded
    server this process started (settings read its data dir and socket).
    """
    stop_embedded()
    start_embedded()


def stop_embedded() -> None:
    """Stop the embedded server this process started as a crash would (`-m immediate`): every
    connection drops at once, nothing is checkpointed. `start_embedded` brings it back."""
    if os.environ.get("DATABASE_URL"):
        raise ImproperlyConfigured("Only the embedded database can be crashed and restarted.")
    _pg_ctl("-m", "immediate", "-w", "stop")


def start_embedded() -> None:
    """Start again the embedded server `stop_embedded` stopped, on the same socket."""
    pgdata = settings.DATA_DIR / "pg"
    socket_dir = settings.DATABASES["default"]["HOST"]
    _pg_ctl("-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(pgdata / "log"), "start")
    _adopt_restarted(pgdata)


def _pg_ctl(*args: str) -> None:
    from pgserver._commands import POSTGRES_BIN_PATH  # heavy, as in `embedded_url`

    pgdata = settings.DATA_DIR / "pg"
    user = "pgserver" if os.geteuid() == 0 else None
    done = subprocess.run(  # noqa: S603  # our own bundled binary
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), *args],
        check=False,
        user=user,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {done.stderr.strip()}")


def _adopt_restarted(pgdata: Path) -> None:
    """Hand the restarted server to pgserver's handle of this process, so the handle stops it
    when the process exits, as it would have stopped the first one. The handle remembers the
    postmaster it started, which the crash killed: left alone, it would see no server to stop
    and `make chaos` would leave the new one running."""
    # Imported here: heavy, and only the embedded server needs them (as in `embedded_url`).
    from pgserver.postgres_server import PostgresServer
    from pgserver.utils import PostmasterInfo

    server = PostgresServer._instances.get(pgdata.resolve())
    if server is not None:
        server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)
