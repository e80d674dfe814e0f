from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentos.core import audit
from missions import killswitch


class Command(BaseCommand):
    help = (
        "Stop everything: every run, lease and schedule, every sandbox's egress token, every"
        " sandbox on every node; then say what was stopped. Needs --yes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--yes", action="store_true", help="confirm: nothing stops without it")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["yes"]:
            raise CommandError("Nothing was stopped: run it again with --yes to stop everything.")
        stopped = killswitch.engage(actor=audit.Actor.command("kill_switch"))
        self.stdout.write(f"Stopped {len(stopped.runs)} runs: {_ids(stopped.runs)}")
        self.stdout.write(f"Took back {stopped.leases_revoked} leases.")
        self.stdout.write(
            f"Paused {len(stopped.schedules)} schedules: {', '.join(stopped.schedules) or '-'}"
        )
        self.stdout.write("Revoked every sandbox's egress token.")
        for node, steps in stopped.sandboxes.items():
            self.stdout.write(f"Node {node}: killed {len(steps)} sandboxes {_ids(steps)}")
        for node, why in stopped.unreachable.items():
            self.stderr.write(f"Node {node} did not answer: {why}")


def _ids(items: list[Any]) -> str:
    return ", ".join(str(item) for item in items) or "-"
