"""`manage.py egress`: the egress service alone (`manage.py serve` starts it with the rest)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand

from cluster import egress


class Command(BaseCommand):
    help = "Serve the sandboxes' egress sockets (allow-list proxy and API bridges) until stopped."

    def handle(self, *args: Any, **options: Any) -> None:
        service = egress.Service()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, service.stop)
            await service.serve()

        self.stdout.write(f"egress: serving sockets in {service.root}")
        asyncio.run(main())
