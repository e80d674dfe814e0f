"""`manage.py kernel_worker`: one kernel loop in the foreground (what each huey worker runs).

Used by the chaos tests, which kill and restart such processes, and handy to watch a worker.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel.worker import Worker


class Command(BaseCommand):
    help = "Run one kernel worker loop until SIGINT/SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-runs", type=int, default=None, help="Runs executed at once.")
        parser.add_argument("--lease", type=float, default=None, help="Lease length (seconds).")
        parser.add_argument("--poll", type=float, default=None, help="Slow poll (seconds).")

    def handle(
        self,
        *args: Any,
        max_runs: int | None,
        lease: float | None,
        poll: float | None,
        **options: Any,
    ) -> None:
        for name, value in (("--max-runs", max_runs), ("--lease", lease), ("--poll", poll)):
            if value is not None and value <= 0:
                raise CommandError(f"{name} must be positive, not {value}.")
        worker = Worker(max_runs=max_runs, lease_seconds=lease, poll_seconds=poll)

        def stop(signum: int, frame: FrameType | None) -> None:
            worker.stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        worker.run_forever()
