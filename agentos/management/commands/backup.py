"""`manage.py backup [--to DIR] [--verify [ARCHIVE]] [--without-vault-key]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentos.backups import archive, passphrase, restore, verify
from agentos.backups.sealed import ArchiveError


class Command(BaseCommand):
    help = (
        "Write one encrypted archive of the whole install (database, repositories, artifacts,"
        " settings, the vault key sealed by the passphrase), or with --verify prove one"
        " restorable. The passphrase comes from AGENTOS_BACKUP_PASSPHRASE or a prompt."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--to", type=Path, help="Folder of the archive (AGENTOS_BACKUP_DIR).")
        parser.add_argument(
            "--verify",
            nargs="?",
            const="",
            metavar="ARCHIVE",
            help="Restore the latest archive (or ARCHIVE) into a scratch database and compare.",
        )
        parser.add_argument(
            "--without-vault-key",
            action="store_true",
            help="Leave the vault key out: stored secrets are unreadable after a restore.",
        )

    def handle(
        self,
        *args: Any,
        to: Path | None,
        verify: str | None,
        without_vault_key: bool,
        **options: Any,
    ) -> None:
        directory = to or archive.default_directory()
        secret = passphrase.obtain(confirm=verify is None)
        try:
            checked = archive.check_passphrase(secret)
            if verify is not None:
                self._verify(Path(verify) if verify else None, directory, checked)
                return
            made = archive.create(
                directory=directory, passphrase=checked, with_vault_key=not without_vault_key
            )
        except (archive.BackupError, restore.RestoreError, ArchiveError) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"Backup written: {made.path}\n"
            f"  {made.size / 1e6:.1f} MB in {made.seconds:.1f} s: {made.tables} tables"
            f" ({made.rows} rows), {made.repositories} repositories, {made.files} files;"
            f" vault key {made.vault_key}."
        )
        for note in made.notes:
            self.stdout.write(self.style.WARNING(note))

    def _verify(self, given: Path | None, directory: Path, secret: str) -> None:
        found = given or next(reversed(archive.archives(directory)), None)
        if found is None:
            raise CommandError(f"No archive in {directory} to verify.")
        if not found.is_file():
            raise CommandError(f"{found}: no such archive.")
        report = verify.verify(found, secret)
        for line in report.mismatches:
            self.stdout.write(self.style.ERROR(f"MISMATCH {line}"))
        if not report.ok:
            raise CommandError(
                f"{found}: {len(report.mismatches)} mismatches; not restorable as is."
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"Verified {found}: {report.tables} tables, {report.rows} rows and"
                f" {report.artifacts} artifacts restored and equal to the manifest."
            )
        )
