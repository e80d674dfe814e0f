"""`manage.py memory_reindex [--scope S] [--no-embed]`: the memory index rebuilt from the
repositories alone, vectors included (`memory.reindexing`), with a progress bar on stderr."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import reindexing, repository
from memory.notes import NoteError
from memory.progress import Progress


class Command(BaseCommand):
    help = (
        "Rebuild the memory index (PostgreSQL) from the memory repositories, which are the truth:"
        " rows, then vectors (from the embedding cache, else computed here). A reindex stopped"
        " midway leaves the index as it was; run again, it re-embeds nothing already done."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scope", action="append", help="Only this scope (repeatable).")
        parser.add_argument(
            "--no-embed",
            action="store_true",
            help="Leave the vectors the cache lacks to the worker pool (the index answers by"
            " meaning once it has computed them).",
        )

    def handle(self, *args: Any, scope: list[str] | None, no_embed: bool, **options: Any) -> None:
        known = repository.scopes()
        wanted = scope or known
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise CommandError(f"No memory repository for {', '.join(unknown)}.")
        progress = Progress.on(self.stderr)
        for name in wanted:
            if len(wanted) > 1:
                self.stderr.write(f"{name}:")
            try:
                rebuilt = reindexing.reindex(name, embed=not no_embed, progress=progress)
            except NoteError as error:
                raise CommandError(f"{name}: {error}") from error
            line = f"{name}: {rebuilt.notes} notes, {rebuilt.embedded} vectors computed"
            if rebuilt.without_vector:
                line += f", {rebuilt.without_vector} left to the worker pool"
            self.stdout.write(line)
