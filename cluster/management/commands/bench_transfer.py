"""`manage.py bench_transfer` (`make bench-cluster`): the worktree transfer's cost per step on a
node that shares no filesystem with the control plane, next to a level-1 step on the local node
(`cluster.proving.transfer_bench`). Needs root."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster.proving import testhosts, transfer_bench


class Command(BaseCommand):
    help = "Print the worktree transfer's cost per step next to a level-1 step on the local node."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--repeats", type=int, default=5, choices=range(1, 51))

    def handle(self, *args: Any, repeats: int, **options: Any) -> None:
        try:
            figures = transfer_bench.run(repeats=repeats, say=self.stderr.write)
        except testhosts.TestHostsError as error:
            raise CommandError(str(error)) from None
        for line in transfer_bench.report(figures):
            self.stdout.write(line)
