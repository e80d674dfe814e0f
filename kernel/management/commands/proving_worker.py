"""`manage.py proving_worker`: a `kernel_worker` that also runs the kernel's proving programs.

The chaos harness, the benchmark and the tests that kill workers start this one: the product's
worker knows only the programs the apps register, and the chaos workload is not one of them.
"""

from __future__ import annotations

from typing import Any

from kernel import proving
from kernel.management.commands import kernel_worker


class Command(kernel_worker.Command):
    help = "Run one kernel worker loop, the chaos workload's programs included, until SIGTERM."

    def handle(self, *args: Any, **options: Any) -> None:
        proving.register()
        super().handle(*args, **options)
