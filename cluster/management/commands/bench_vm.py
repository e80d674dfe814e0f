"""`manage.py bench_vm`: a command's overhead in a warm level-2 VM (its latency minus its own run
time in the guest), next to level 1 on the same node, a cold boot for reference, and a page
rendered cold then warm in the same Chromium (`cluster.proving.vm_bench`). Its last line is
`vm_warm_overhead_ms=… target_ms=500 … met|MISSED`; a missed target exits non-zero."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster.proving import vm_bench
from cluster.runner import vm


class Command(BaseCommand):
    help = "Benchmark commands in a warm level-2 VM against level 1 on this node."
    # A node check: it needs neither the database nor the project's system checks.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--commands", type=int, default=vm_bench.COMMANDS, help="Runs of each command timed."
        )

    def handle(self, *args: Any, commands: int, **options: Any) -> None:
        if commands < 10:
            raise CommandError("--commands must be at least 10.")
        ok, why = vm.available()
        if not ok:
            raise CommandError(why)
        report = vm_bench.run(commands=commands, say=self.stdout.write)
        self.stdout.write(report.summary())
        if not report.met:
            raise CommandError(
                f"The warm overhead target ({vm_bench.TARGET_SECONDS * 1000:g} ms) was missed."
            )
