"""`manage.py memory_reindex [--scope S]`: the memory index rebuilt from the repositories alone."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import repository, store
from memory.notes import NoteError


class Command(BaseCommand):
    help = (
        "Rebuild the memory index (PostgreSQL) from the memory repositories, which are the truth."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scope", action="append", help="Only this scope (repeatable).")

    def handle(self, *args: Any, scope: list[str] | None, **options: Any) -> None:
        known = repository.scopes()
        wanted = scope or known
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise CommandError(f"No memory repository for {', '.join(unknown)}.")
        for name in wanted:
            try:
                count = store.reindex(name)
            except NoteError as error:
                raise CommandError(f"{name}: {error}") from error
            self.stdout.write(f"{name}: {count} notes")
