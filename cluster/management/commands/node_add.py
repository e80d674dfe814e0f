"""`manage.py node_add NAME ADDRESS [--port N] [--user U] [--host-key FILE] [--from ADDRESS]
[--root DIR] [--replace]`: register a node (or update it), pin its SSH host key, and print the
line to put in root's `authorized_keys` on the node (the runner as forced command, from the
control plane's address)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster import nodes


class Command(BaseCommand):
    help = "Register a node reached over SSH, with its pinned host key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The node's name (lowercase letters, digits, dashes).")
        parser.add_argument("address", help="Its host name or IP address.")
        parser.add_argument("--port", type=int, default=22)
        parser.add_argument("--user", default="root", help="The SSH user (root by default).")
        parser.add_argument(
            "--host-key",
            type=Path,
            help="The node's public host key file (its /etc/ssh/ssh_host_ed25519_key.pub): "
            "without it the node is registered but refused until a key is pinned.",
        )
        parser.add_argument(
            "--from",
            dest="from_address",
            help="This machine's address as the node sees it: printed in the from= option.",
        )
        parser.add_argument(
            "--root", default=nodes.DEFAULT_NODE_ROOT, help="The runner's directory on the node."
        )
        parser.add_argument(
            "--replace",
            action="store_true",
            help="Update the node of that name (a new address or host key); its history stays.",
        )

    def handle(
        self,
        *args: Any,
        name: str,
        address: str,
        port: int,
        user: str,
        host_key: Path | None,
        from_address: str | None,
        root: str,
        replace: bool,
        **options: Any,
    ) -> None:
        key_line = ""
        if host_key is not None:
            try:
                key_line = host_key.read_text()
            except OSError as error:
                raise CommandError(f"--host-key {host_key}: {error.strerror}") from None
        try:
            # The line first: a bad --from registers nothing.
            line = nodes.authorized_keys_line(name=name, from_address=from_address, root=root)
            node = nodes.add_node(
                name=name,
                address=address,
                port=port,
                ssh_user=user,
                host_key=key_line,
                replace=replace,
            )
        except nodes.NodeError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"Node {node.name} registered at {node.address}:{node.port}.")
        if not node.host_key:
            self.stdout.write(
                "No host key pinned: every call to it is refused until one is (--host-key)."
            )
        self.stdout.write(f"Put this line in {user}'s authorized_keys on {node.name}:")
        self.stdout.write(line)
