"""`manage.py testnodes` (`make nodes`): three SSH nodes on this machine, registered as
testnode1..3, until Ctrl-C. Each is a network namespace with its own sshd and runner, and a
filesystem root of its own (see `cluster.proving.testhosts`); steps are then placed on them like
on real machines. They are disabled when the command stops. Needs root."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster import nodes, transport
from cluster.models import Node
from cluster.proving import testhosts


class Command(BaseCommand):
    help = "Start three SSH test nodes on this machine and register them, until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--count", type=int, default=3, choices=range(1, 10))

    def handle(self, *args: Any, count: int, **options: Any) -> None:
        names = [f"testnode{index}" for index in range(1, count + 1)]
        stopping = threading.Event()

        def stop(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            hosts = testhosts.start(
                names=names,
                base=Path(settings.DATA_DIR) / "testnodes",
                public_key_line=nodes.public_key_line(),
            )
        except testhosts.TestHostsError as error:
            raise CommandError(str(error)) from None
        try:
            for host in hosts.nodes:
                node = nodes.add_node(
                    name=host.name,
                    address=host.node_ip,
                    port=host.port,
                    host_key=host.host_key,
                    replace=True,
                )
                try:
                    nodes.hello(node)
                    outcome = "up"
                except (transport.TransportError, transport.RunnerError) as error:
                    outcome = str(error)
                self.stdout.write(f"{host.name}: {host.node_ip}:{host.port} ({outcome})")
            self.stdout.write("Running; Ctrl-C stops the nodes.")
            stopping.wait()
        finally:
            nodes.close_all()
            hosts.stop()
            Node.objects.filter(name__in=names).update(enabled=False)
            self.stdout.write("Stopped; the test nodes are disabled.")
