"""`manage.py memory_eval FILE [--k 10] [--pad-to N] [--busy]`: a question set asked of
memory_search.

Per-category hit@k and MRR next to a grep baseline on the same notes, then the last line
`memory hit@10=… mrr=… p95_ms=… notes=… grep_hit@10=…`. A missed target is reported, not an
error: only a file that cannot be evaluated exits non-zero. A long embedding (a padded scope's
first run) shows a progress bar on stderr. See memory/proving/evaluation.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel.proving import bench, command
from memory.progress import Progress
from memory.proving import evalsets, evaluation


class Command(BaseCommand):
    help = "Evaluate memory search on a question set (hit@k, MRR, latency) against a grep."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="The data set (JSON).")
        parser.add_argument("--k", type=int, default=10, help="Results per question scored.")
        parser.add_argument(
            "--pad-to",
            type=int,
            default=0,
            metavar="N",
            help="Fill one conversation's scope with synthetic notes up to N notes.",
        )
        parser.add_argument(
            "--busy",
            action="store_true",
            help="Time the searches again while another process keeps a core busy.",
        )
        parser.add_argument(
            "--any-database",
            action="store_true",
            help="Pad on the configured database even if it is not a dedicated bench one.",
        )

    def handle(
        self,
        *args: Any,
        file: Path,
        k: int,
        pad_to: int,
        busy: bool,
        any_database: bool,
        **options: Any,
    ) -> None:
        if not 1 <= k <= 100 or pad_to < 0:
            raise CommandError("--k is 1 to 100 (what a search returns), --pad-to at least 0.")
        # Padding writes up to N notes for good: never into the owner's memory by accident.
        dedicated = _dedicated_database()
        if pad_to and not any_database and not dedicated:
            raise CommandError(
                f"The data dir is {settings.DATA_DIR}, not a dedicated benchmark one. Use"
                " `make bench-memory` (AGENTOS_DATA_DIR=.data/bench-memory), or pass"
                " --any-database."
            )
        if dedicated:
            bench.call_migrate()  # a new benchmark data dir starts empty
        try:
            dataset = evalsets.load(file)
        except evalsets.DatasetError as error:
            raise CommandError(str(error)) from error
        say = self.stdout.write
        say(
            f"memory evaluation of {dataset.name}: {len(dataset.conversations)} conversations,"
            f" {dataset.documents:,} documents, {dataset.questions} questions, k = {k}"
        )
        report = evaluation.run(
            dataset,
            evaluation.StoreMemory(Progress.on(self.stderr)),
            k=k,
            pad_to=pad_to,
            busy=busy,
            say=say,
        )
        for line in report.lines():
            say(line)
        say(report.summary())


def _dedicated_database() -> bool:
    """The embedded database of a data dir named `bench` or `bench-…`: the memory benchmark
    has one of its own, beside the kernel's (`.data/bench`), so both run at once."""
    named = settings.DATA_DIR.name.startswith("bench-") and not os.environ.get("DATABASE_URL")
    return named or command.is_dedicated_database()
