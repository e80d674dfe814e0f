"""`manage.py bench_live`: from a step's commit to the owner's browser showing it (`make bench`).

The last line is `live_p95_ms=… live_p50_ms=… live_max_ms=… started_p95_ms=… runs=… deltas=…
unseen=…`. A missed target is reported, not an error: only a benchmark that could not measure
exits non-zero.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from kernel.proving.command import BenchCommand
from missions.proving import live_bench


class Command(BenchCommand):
    help = "Benchmark the live path: step commit to the owner's browser, with runs streaming."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--runs", type=int, default=live_bench.RUNS, help="Runs at once.")
        parser.add_argument(
            "--steps-per-run",
            type=int,
            default=live_bench.STEPS,
            help="Steps of each run, per round.",
        )
        parser.add_argument("--rounds", type=int, default=live_bench.ROUNDS, help="Rounds.")
        # `make bench` passes the same BENCH_ARGS to every benchmark: accept (and ignore) the
        # kernel's own options (its --steps are steps of one run measured alone).
        for kernel_only in ("--steps", "--repeats"):
            parser.add_argument(kernel_only, type=int, help=argparse.SUPPRESS)

    def handle(
        self,
        *args: Any,
        runs: int,
        steps_per_run: int,
        rounds: int,
        **options: Any,
    ) -> None:
        if runs < 1 or steps_per_run < 2 or rounds < 1:
            raise CommandError("--runs and --rounds must be positive, --steps-per-run at least 2.")
        live_bench.register()  # the benchmark's runs execute its program, in this process
        say = self.stdout.write
        say(f"live path benchmark, data dir {settings.DATA_DIR}")
        try:
            report = live_bench.run(runs_count=runs, steps=steps_per_run, rounds=rounds, say=say)
        except live_bench.BenchError as error:
            raise CommandError(str(error)) from error
        for line in report.lines():
            say(line)
        say(report.summary())
