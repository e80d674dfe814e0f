"""`manage.py runner_deploy`: install this checkout's runner on every enabled remote node (each
node validates it, then swaps it in; steps running keep their version, environments stay)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from cluster import deploy


class Command(BaseCommand):
    help = "Install this checkout's runner (cluster/runner) on every enabled remote node."

    def handle(self, *args: Any, **options: Any) -> None:
        report = deploy.deploy_all()
        failed = [name for name, outcome in report.items() if outcome.startswith("failed")]
        for name, outcome in report.items():
            self.stdout.write(f"{name}: {outcome}")
        if not report:
            self.stdout.write("No remote node is registered and enabled.")
        if failed:
            raise CommandError(f"the runner was not installed on {', '.join(failed)}")
