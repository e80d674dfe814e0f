"""`manage.py node_list [--refresh]`: the nodes, their state and last telemetry."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from cluster import nodes
from cluster.models import Node


class Command(BaseCommand):
    help = "List the nodes (--refresh asks each runner for its telemetry first)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--refresh", action="store_true", help="Ask every enabled node first.")

    def handle(self, *args: Any, refresh: bool, **options: Any) -> None:
        nodes.local_node()
        if refresh:
            for name, outcome in nodes.refresh_all().items():
                if outcome != "up":
                    self.stderr.write(f"{name}: {outcome}")
        self.stdout.write(
            f"{'NAME':<16} {'ADDRESS':<24} {'STATUS':<8} {'ON':<3} {'LEVELS':<7} "
            f"{'RUNNER':<17} {'LOAD':>5} {'MEM FREE':>9} TELEMETRY AT"
        )
        for node in Node.objects.all():
            values = node.telemetry_values
            memory = values.get("mem_available")
            address = f"{node.address}:{node.port}" if node.address else "(this machine)"
            self.stdout.write(
                f"{node.name:<16} {address:<24} {node.status:<8} "
                f"{'yes' if node.enabled else 'no':<3} "
                f"{','.join(str(level) for level in node.levels) or '-':<7} "
                f"{node.runner_version or '-':<17} {values.get('load1', '-')!s:>5} "
                f"{_size(memory):>9} "
                f"{node.telemetry_at.isoformat(timespec='seconds') if node.telemetry_at else '-'}"
            )
            if node.status == Node.Status.LOST:
                self.stdout.write(f"  lost: {node.lost_reason}")


def _size(value: Any) -> str:
    if not isinstance(value, int):
        return "-"
    return f"{value / (1 << 30):.1f}G"
