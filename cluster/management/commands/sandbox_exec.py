"""`manage.py sandbox_exec --level 1 --workdir DIR [--timeout S] -- CMD...`: how an owner checks a
node's sandbox. It runs CMD exactly as the shell tool does, prints the output and the summary line,
and exits with CMD's exit code: 124 on timeout, 130 when interrupted (Ctrl-C, SIGTERM), 2 when
the input is bad or the sandbox is unavailable.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster import sandbox

EXIT_TIMED_OUT = 124
EXIT_CANCELLED = 130
EXIT_BAD_INPUT = 2


class Command(BaseCommand):
    help = "Run a command in the sandbox of a level, in a workdir, as the shell tool would."
    # A node check: it needs neither the database nor the project's system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--level", type=int, default=1, help="Sandbox level (1: bubblewrap).")
        parser.add_argument("--workdir", type=Path, required=True, help="Mounted at /workspace.")
        parser.add_argument("--timeout", type=float, default=300, help="Wall clock, in seconds.")
        parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command.")

    def handle(
        self, *args: Any, level: int, workdir: Path, timeout: float, argv: list[str], **options: Any
    ) -> None:
        if argv[:1] == ["--"]:
            argv = argv[1:]
        if not argv:
            raise CommandError(
                "nothing to run: put the command after --", returncode=EXIT_BAD_INPUT
            )
        if timeout <= 0:
            raise CommandError("--timeout must be positive", returncode=EXIT_BAD_INPUT)
        if not workdir.is_dir():
            raise CommandError(
                f"the workdir {workdir} is not a directory", returncode=EXIT_BAD_INPUT
            )
        stopping = threading.Event()
        try:
            box = sandbox.for_level(level)
            with _stop_on_signals(stopping):
                result = box.run(
                    argv,
                    workdir=workdir,
                    limits=sandbox.Limits(wall_seconds=timeout),
                    stopping=stopping,
                )
        except (sandbox.SandboxUnavailable, ValueError) as error:
            raise CommandError(str(error), returncode=EXIT_BAD_INPUT) from error
        self.stdout.write(result.summary())
        if result.timed_out:
            sys.exit(EXIT_TIMED_OUT)
        if result.cancelled:
            sys.exit(EXIT_CANCELLED)
        if result.exit_code:
            sys.exit(result.exit_code)


@contextlib.contextmanager
def _stop_on_signals(stopping: threading.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM cancel the run (the sandbox kills its tree) instead of raising in the
    middle of it. Signal handlers can only be set from the main thread (call_command elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda _sig, _frame: stopping.set())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
