from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agentos.core import vault


class Command(BaseCommand):
    help = (
        "Add a new primary vault key (older keys are kept to decrypt) and re-encrypt every stored "
        f"secret with it. With {vault.ENV} set, put the new key first there instead: this only "
        "re-encrypts."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if vault.keys_from_environment():
            self.stdout.write(f"Keys come from {vault.ENV}: re-encrypting with its first key.")
        else:
            vault.rotate()
            self.stdout.write(f"New primary key added to {vault.key_file()}.")
        report = vault.reencrypt()
        self.stdout.write(f"{report.rewritten} secret re-encrypted.")
        if report.unreadable:
            raise CommandError(
                "No vault key opens these secrets (their key is lost); they were left as they "
                "are: set them again. " + ", ".join(report.unreadable)
            )
