"""`manage.py bench_kernel`: the kernel benchmark (`make bench`), on its own database.

The last line is `kernel_step_us=… floor_us=… ratio=… resume_1000_ms=… throughput_ratio_k32=…`.
A missed target is reported, not an error: only a benchmark that could not measure exits non-zero.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from kernel import proving
from kernel.proving import bench
from kernel.proving.command import BenchCommand


class Command(BenchCommand):
    help = "Benchmark the kernel's step, resume and throughput against floors measured alongside."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--steps",
            type=int,
            default=bench.PAIRS * bench.BLOCK_STEPS,
            help="Steps per side of each one-step line, in pairs of blocks.",
        )
        parser.add_argument(
            "--rounds",
            type=int,
            default=bench.ROUNDS,
            help="Throughput rounds (floor, then kernel).",
        )
        parser.add_argument("--repeats", type=int, default=7, help="Resumes measured (median).")
        parser.add_argument(
            "--profile", action="store_true", help="Also print a cProfile of one kernel run."
        )

    def handle(
        self,
        *args: Any,
        steps: int,
        rounds: int,
        repeats: int,
        profile: bool,
        **options: Any,
    ) -> None:
        if min(steps, rounds, repeats) < 1:
            raise CommandError("--steps, --rounds and --repeats must be positive.")
        proving.register()  # the benchmark's runs execute `chaos.noop`, here and in its workers
        say = self.stdout.write
        say(f"kernel benchmark, data dir {settings.DATA_DIR}")
        try:
            report = bench.run(steps=steps, rounds=rounds, repeats=repeats, say=say)
            if profile:
                say(bench.profile_kernel_step(bench.make_account(), steps))
        except bench.BenchError as error:
            raise CommandError(str(error)) from error
        for line in report.lines():
            say(line)
        say(report.summary())
