"""`manage.py bench_cache`: the share of a mission's input the provider's prompt cache serves,
for Anthropic and OpenAI, across a compaction (`make bench`).

The last line is `cache_share_anthropic=… cache_share_openai=… … cache_met=yes|no`. A missed target
is reported, with the turns of one run, not an error: only a benchmark that could not measure
exits non-zero.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from kernel.proving.command import BenchCommand
from missions.proving import cache_bench


class Command(BenchCommand):
    help = "Benchmark the prompt cache's share of a 30-turn mission's input, per provider."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--repeats", type=int, default=cache_bench.REPEATS, help="Missions per provider."
        )
        parser.add_argument(
            "--turns", action="store_true", help="Print the turns of one run, even if met."
        )

    def handle(self, *args: Any, repeats: int, turns: bool, **options: Any) -> None:
        if repeats < 1:
            raise CommandError("--repeats must be positive.")
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
