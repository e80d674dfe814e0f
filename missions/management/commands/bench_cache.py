"""`manage.py bench_cache`: the share of a mission's input the provider's prompt cache serves,
for Anthropic and OpenAI, across a compaction (`make bench`).

The last line is `cache_share_anthropic=… cache_share_openai=… … cache_met=yes|no`. A missed target
is reported, with the turns of one run, not an error: only a benchmark that could not measure
exits non-zero.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from missions.proving import cache_bench


class Command(BaseCommand):
    help = "Benchmark the prompt cache's share of a 30-turn mission's input, per provider."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--repeats", type=int, default=cache_bench.REPEATS, help="Missions per provider."
        )
        parser.add_argument(
            "--turns", action="store_true", help="Print the turns of one run, even if met."
        )
        parser.add_argument(
            "--any-database",
            action="store_true",
            help="Run on the configured database even if it is not a dedicated bench one.",
        )

    def handle(
        self, *args: Any, repeats: int, turns: bool, any_database: bool, **options: Any
    ) -> None:
        if repeats < 1:
            raise CommandError("--repeats must be positive.")
        # It writes missions and runs: never on the owner's data by accident.
        if not any_database and not cache_bench.is_dedicated_database():
            raise CommandError(
                f"The data dir is {settings.DATA_DIR}, not a dedicated benchmark one. Use"
                " `make bench` (AGENTOS_DATA_DIR=.data/bench), or pass --any-database."
            )
        say = self.stdout.write
        say(f"prompt-cache benchmark, data dir {settings.DATA_DIR}")
        try:
            report = cache_bench.run(repeats=repeats, say=say)
        except cache_bench.BenchError as error:
            raise CommandError(str(error)) from error
        for line in report.lines():
            say(line)
        if turns or not report.met():
            for line in report.per_turn():
                say(line)
        if not report.met():
            say("   a target is MISSED: see the turns above for where the cache is missed")
        say(report.summary())
