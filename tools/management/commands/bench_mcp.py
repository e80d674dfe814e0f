"""`manage.py bench_mcp`: our MCP call path's median overhead per call against the SDK called
directly (`tools.proving.mcp_bench`). Its last line is `mcp_call_ms=… overhead_ms=… met|MISSED`;
a missed target exits non-zero."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools.proving import mcp_bench


class Command(BaseCommand):
    help = "Benchmark an MCP tool call through our path (sandbox, pool, pin check) vs the SDK."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--calls", type=int, default=mcp_bench.CALLS, help="Calls timed.")

    def handle(self, *args: Any, calls: int, **options: Any) -> None:
        if calls < 10:
            raise CommandError("--calls must be at least 10.")
        # Its own data dir may hold a database made by an older version: bring it up to date.
        call_command("migrate", verbosity=0, interactive=False)
        report = mcp_bench.run(calls=calls, say=self.stdout.write)
        self.stdout.write(report.summary())
        if not report.met:
            raise CommandError(f"The overhead target ({mcp_bench.TARGET_MS:g} ms) was missed.")
