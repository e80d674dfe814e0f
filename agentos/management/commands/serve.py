"""`manage.py serve`: migrate, create the owner on first start, run web server + workers."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connection

from agentos import credentials
from agentos.core import database, owner, reachability
from agentos.processes import Child, EmbeddedDatabase, ProcessGroup
from missions import demo
from missions.models import Mission


class Command(BaseCommand):
    help = "Run agentos: database, web server (HTTP + WebSocket) and the worker pool, until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("AGENTOS_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("AGENTOS_PORT", "8000")))
        parser.add_argument("--workers", type=int, default=settings.HUEY_WORKERS)
        parser.add_argument(
            "--no-demo", action="store_true", help="Do not create the demo mission on first start."
        )

    def handle(
        self, *args: Any, host: str, port: int, workers: int, no_demo: bool, **options: Any
    ) -> None:
        if not 0 < port < 65536:
            raise CommandError(f"--port must be between 1 and 65535, not {port}.")
        if workers < 1:
            raise CommandError("--workers must be at least 1.")
        _refuse_a_busy_port(host, port)
        self._wait_for_database()
        call_command("migrate", interactive=False, verbosity=0)
        url = f"http://{host}:{port}"
        created = owner.ensure_owner()
        if created:
            self.stdout.write(credentials.render(created, url=url))
        if not no_demo:
            self._start_demo()

        # Children reach the database this process started through DATABASE_URL; they never
        # start or stop it themselves. This process starts it again if it dies.
        embedded = (
            None
            if os.environ.get("DATABASE_URL")
            else EmbeddedDatabase(settings.DATA_DIR / "pg", database.start_embedded)
        )
        env = {**os.environ, "DATABASE_URL": settings.DATABASE_URL}
        env.setdefault("DJANGO_SETTINGS_MODULE", "agentos.settings")
        python = sys.executable
        manage = str(settings.BASE_DIR / "manage.py")
        processes = ProcessGroup(
            children=[
                Child(
                    "web",
                    [
                        python,
                        "-m",
                        "daphne",
                        "-b",
                        host,
                        "-p",
                        str(port),
                        "agentos.asgi:application",
                    ],
                ),
                # SIGINT is huey's graceful stop: running tasks finish before the worker exits.
                Child(
                    "workers",
                    [
                        python,
                        manage,
                        "run_huey",
                        "--workers",
                        str(workers),
                        "--worker-type",
                        "process",
                        "--skip-checks",
                    ],
                    stop_signal=signal.SIGINT,
                ),
                # The sandboxes' only way out: their egress sockets and API bridges.
                Child("egress", [python, manage, "egress", "--skip-checks"]),
            ],
            env=env,
            ready_url=f"{url}/api/v1/health",
            on_ready=lambda: self.stdout.write(
                self.style.SUCCESS(f"agentos is up at {url}  (Ctrl-C stops everything)")
            ),
            database=embedded,
        )
        sys.exit(processes.run())

    def _wait_for_database(self) -> None:
        """A database of the owner's (`DATABASE_URL`) may start after agentos (a reboot, a
        compose file): wait for it, saying so once, instead of exiting with a traceback.
        Ctrl-C stops the wait."""
        backoff = reachability.Backoff()
        while True:
            try:
                connection.ensure_connection()
            except DatabaseError as error:
                if not reachability.is_unreachable(error):
                    raise
                reachability.went_away(error, where="start")
                connection.close()
                time.sleep(backoff.next_delay())
                continue
            reachability.came_back()
            return

    def _start_demo(self) -> None:
        """While nothing was ever asked of agentos (no mission yet): the demo project and its
        mission (see missions.demo). Decided from the data, not from "the owner was just
        created", so a start killed between the two still gets its demo."""
        if Mission.objects.exists():
            return
        try:
            run = demo.ensure_demo()
        except Exception as error:  # the product runs without its demo
            self.stderr.write(f"The demo mission could not be created: {error}")
            return
        if run is not None:
            who = (
                "the offline scripted model (no API key set)"
                if run.contract.get("scripted_stand_in") or run.contract.get("offline")
                else f"{run.model}"
            )
            self.stdout.write(f"Demo mission started, played by {who}: {demo.GOAL}")


def _refuse_a_busy_port(host: str, port: int) -> None:
    """Fail now with a clear message rather than restart a web server that cannot bind, forever."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise CommandError(
                f"Cannot listen on {host}:{port} ({error.strerror}). Stop what uses it, or pick "
                "another port: AGENTOS_PORT=8001 make run"
            ) from None
