from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentos.core import audit
from agentos.core.errors import DomainError
from tools.mcp import servers


class Command(BaseCommand):
    help = (
        "Register an MCP server and list its tools, pending approval:"
        " mcp_add NAME -- COMMAND [ARG...] (stdio, in the sandbox) or mcp_add NAME --url URL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("argv", nargs="*", help="after --: the server's command line")
        parser.add_argument("--url", help="a streamable-HTTP endpoint instead of a command")
        parser.add_argument("--level", type=int, default=1, help="sandbox level (default 1)")
        parser.add_argument("--bridge", default="", help="the bridge adding its credentials")
        parser.add_argument("--environment", default="", help="a project whose /env it mounts")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            server = servers.add_server(
                name=options["name"],
                command=options["argv"] or None,
                url=options["url"],
                level=options["level"],
                environment=options["environment"],
                bridge=options["bridge"],
                actor=audit.Actor.command("mcp_add"),
            )
        except DomainError as error:
            raise CommandError(error.message) from None
        self.stdout.write(f"Added {server.name} ({server.version or 'unknown version'}).")
        for tool in server.tools.order_by("name"):
            self.stdout.write(f"  {tool.name}  {tool.description_hash[:12]}  pending approval")
        self.stdout.write(f"Approve it: POST /api/v1/mcp/servers/{server.name}/approve")
