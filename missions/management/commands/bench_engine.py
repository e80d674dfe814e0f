"""`manage.py bench_engine`: the agent loop's cost per turn and its flatness (`make bench`).

The last line is `engine_turn_us=… turn_floor_us=… turn_ratio=… late_early=…`. A missed target is
reported, with a cProfile of one run to show where the time goes, not an error: only a benchmark
that could not measure exits non-zero.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from kernel.proving.command import BenchCommand
from missions.proving import bench


class Command(BenchCommand):
    help = "Benchmark the agent loop per turn against the kernel's floor, and its flatness."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--turns", type=int, default=bench.TURNS, help="Turns of each run.")
        parser.add_argument(
            "--rounds", type=int, default=bench.ROUNDS, help="Flatness runs (of --turns turns)."
        )
        parser.add_argument(
            "--profile", action="store_true", help="Print a cProfile of one run, even if met."
        )
        # `make bench` passes the same BENCH_ARGS to bench_kernel and to this command: accept
        # (and ignore) the kernel's own options so `BENCH_ARGS="--steps 500"` works for both.
        for kernel_only in ("--steps", "--repeats"):
            parser.add_argument(kernel_only, type=int, help=argparse.SUPPRESS)

    def handle(
        self,
        *args: Any,
        turns: int,
        rounds: int,
        profile: bool,
        **options: Any,
    ) -> None:
        if turns < 8 or rounds < 1:
            raise CommandError("--turns must be at least 8 and --rounds positive.")
        say = self.stdout.write
        say(f"engine benchmark, data dir {settings.DATA_DIR}")
        try:
            report = bench.run(turns=turns, rounds=rounds, say=say)
            missed = not (report.ratio_met and report.flat_met)
            if profile or missed:
                say(bench.profile(bench.make_mission(), turns))
        except bench.BenchError as error:
            raise CommandError(str(error)) from error
        for line in report.lines():
            say(line)
        if missed:
            say("   a target is MISSED: see the cProfile above for where a turn's time goes")
        say(report.summary())
