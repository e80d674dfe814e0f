"""`manage.py backup_drill [--runs 1000] [--notes 10000]`: the backup drill measured.

Fills a dedicated data dir (`AGENTOS_DATA_DIR=.data/backup-drill`, embedded database) with
finished runs and memory notes (`missions.proving.backup_drill`), then times a backup, its
`--verify` and a restore by `manage.py restore` in another process onto a fresh data dir and
workspaces dir (a new embedded server: its start is part of the time). Prints one table for
docs/operations.md. The passphrase comes from AGENTOS_BACKUP_PASSPHRASE.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from agentos.backups import archive, verify
from agentos.backups.schedule import PASSPHRASE_ENV
from missions.proving import backup_drill

DEDICATED = "backup-drill"


class Command(BaseCommand):
    help = "Fill a dedicated data dir with runs and notes, then time backup, verify and restore."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1000)
        parser.add_argument("--notes", type=int, default=10000)
        parser.add_argument("--any-database", action="store_true")

    def handle(self, *args: Any, runs: int, notes: int, any_database: bool, **opts: Any) -> None:
        data = Path(settings.DATA_DIR)
        if data.name != DEDICATED and not any_database:
            raise CommandError(
                f"The data dir is {data}, not a dedicated drill one: use"
                f" AGENTOS_DATA_DIR=.data/{DEDICATED}, or pass --any-database."
            )
        passphrase = archive.check_passphrase(os.environ.get(PASSPHRASE_ENV))
        call_command("migrate", verbosity=0)
        started = time.monotonic()
        added = backup_drill.populate(runs=runs, notes=notes)
        self.stdout.write(f"populated {added} in {time.monotonic() - started:.0f} s")
        made = archive.create(directory=data / "backups", passphrase=passphrase)
        started = time.monotonic()
        checked = verify.verify(made.path, passphrase)
        verified = time.monotonic() - started
        if not checked.ok:
            raise CommandError(f"verify failed: {checked.mismatches}")
        restored = self._restore(made.path, data.with_name(f"{DEDICATED}-restore"))
        self._report(made, verified, restored)

    def _restore(self, path: Path, target: Path) -> float:
        shutil.rmtree(target, ignore_errors=True)
        env = {
            **os.environ,
            "AGENTOS_DATA_DIR": str(target),
            "AGENTOS_WORKSPACES_DIR": str(target / "workspaces"),
        }
        env.pop("DATABASE_URL", None)
        started = time.monotonic()
        done = subprocess.run(  # noqa: S603  # our own manage.py
            [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "restore", str(path)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        if done.returncode != 0:
            raise CommandError(f"restore failed: {done.stderr.strip()}")
        shutil.rmtree(target, ignore_errors=True)
        return seconds

    def _report(self, made: archive.Made, verified: float, restored: float) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            (size,) = cursor.fetchone() or (0,)
            cursor.execute(
                "SELECT (SELECT count(*) FROM kernel_run), (SELECT count(*) FROM kernel_step),"
                " (SELECT count(*) FROM memory_note), (SELECT count(*) FROM kernel_artifact)"
            )
            run_count, steps, note_count, artifact_count = cursor.fetchone() or (0, 0, 0, 0)
        cpu = platform.processor() or platform.machine()
        rows = [
            ("date", datetime.now(UTC).strftime("%Y-%m-%d")),
            ("machine", f"{os.cpu_count()} cores, {cpu}, {platform.system()}"),
            ("content", f"{run_count} runs, {steps} steps, {note_count} notes,"
             f" {artifact_count} artifacts, {made.repositories} repositories"),
            ("database size", f"{size / 1e6:.0f} MB"),
            ("archive size", f"{made.size / 1e6:.1f} MB"),
            ("backup", f"{made.seconds:.1f} s"),
            ("backup --verify", f"{verified:.1f} s"),
            ("restore (new data dir, new embedded server)", f"{restored:.1f} s"),
        ]  # fmt: skip
        self.stdout.write("| measure | value |\n|---|---|")
        for name, value in rows:
            self.stdout.write(f"| {name} | {value} |")
