"""The base of `make bench`'s commands: each writes runs (and cancels unfinished ones) in the
database it is given, so it refuses any but the embedded one of a data dir named `bench`
unless told `--any-database`."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


def is_dedicated_database() -> bool:
    """True when the database is the embedded one of a data dir named `bench`."""
    return settings.DATA_DIR.name == "bench" and not os.environ.get("DATABASE_URL")


class BenchCommand(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--any-database",
            action="store_true",
            help="Run on the configured database even if it is not a dedicated bench one.",
        )

    def execute(self, *args: Any, **options: Any) -> str | None:
        # Never on the owner's data by accident; checked before the command's own options.
        if not options.get("any_database") and not is_dedicated_database():
            raise CommandError(
                f"The data dir is {settings.DATA_DIR}, not a dedicated benchmark one. Use"
                " `make bench` (AGENTOS_DATA_DIR=.data/bench), or pass --any-database."
            )
        return super().execute(*args, **options)
