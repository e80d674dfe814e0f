"""`manage.py restore ARCHIVE`: onto an empty install (docs/operations.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentos.backups import passphrase, restore
from agentos.backups.sealed import ArchiveError


class Command(BaseCommand):
    help = (
        "Restore an archive of `manage.py backup` onto an empty install (a new data dir, or an"
        " empty database), here or on another machine. Passphrase from"
        " AGENTOS_BACKUP_PASSPHRASE or a prompt."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("archive", type=Path)

    def handle(self, *args: Any, archive: Path, **options: Any) -> None:
        if not archive.is_file():
            raise CommandError(f"{archive}: no such archive.")
        secret = passphrase.obtain(confirm=False)
        if not secret:
            raise CommandError(
                "No passphrase: set AGENTOS_BACKUP_PASSPHRASE, or run the command in a terminal."
            )
        try:
            done = restore.restore(archive=archive, passphrase=secret)
        except (restore.RestoreError, ArchiveError) as error:
            raise CommandError(str(error)) from None
        made = done.manifest.get("created", "?")
        self.stdout.write(f"Restored {archive} (made {made}).")
        for before, after in done.rerooted.items():
            self.stdout.write(f"  paths under {before} now under {after}")
        for note in done.notes:
            self.stdout.write(self.style.WARNING(note))
        self.stdout.write("Leases reset: start the workers (`make run`) and runs resume.")
