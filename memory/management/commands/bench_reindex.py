"""`manage.py bench_reindex [--notes N | --largest]`: `memory_reindex` of a scope of N synthetic
notes (or the database's largest scope) timed warm (every vector cached) and with a sample of
its texts to embed, projected to the target of 100,000 notes in 20 minutes
(memory/proving/reindex_bench.py). Only on a dedicated benchmark database: the notes stay, for
the next run."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel.proving import bench
from memory.management.commands.memory_eval import _dedicated_database
from memory.proving import reindex_bench


class Command(BaseCommand):
    help = "Time memory_reindex of N synthetic notes, warm and with texts to embed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--notes", type=int, default=20_000, metavar="N")
        parser.add_argument(
            "--largest",
            action="store_true",
            help="Time the database's largest scope instead of writing N synthetic notes.",
        )
        parser.add_argument(
            "--any-database",
            action="store_true",
            help="Write the notes on the configured database even if it is not a benchmark one.",
        )

    def handle(
        self, *args: Any, notes: int, largest: bool, any_database: bool, **options: Any
    ) -> None:
        if notes < reindex_bench.SAMPLE:
            raise CommandError(f"--notes is at least {reindex_bench.SAMPLE:,} (the sample).")
        dedicated = _dedicated_database()
        if not any_database and not dedicated:
            raise CommandError(
                f"The data dir is {settings.DATA_DIR}, not a dedicated benchmark one: run with"
                " AGENTOS_DATA_DIR=.data/bench-reindex, or pass --any-database."
            )
        if dedicated:
            bench.call_migrate()  # a new benchmark data dir starts empty
        scope = None
        if largest and (scope := reindex_bench.largest_scope()) is None:
            raise CommandError("--largest: the database holds no notes yet.")
        figures = reindex_bench.run(
            notes, progress=self._progress, say=self.stdout.write, scope=scope
        )
        for line in figures.lines():
            self.stdout.write(line)

    def _progress(self) -> reindex_bench.Timed:
        return reindex_bench.Timed(self._progress_line, tty=self.stderr.isatty())

    def _progress_line(self, text: str) -> None:
        self.stderr.write(text, style_func=str, ending="")
        self.stderr.flush()
