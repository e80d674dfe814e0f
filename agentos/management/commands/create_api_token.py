from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentos.core import owner, tokens
from agentos.core.errors import DomainError
from agentos.core.models import Scope


class Command(BaseCommand):
    help = "Create a personal API token for the owner and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="What will use the token.")
        parser.add_argument(
            "--scope",
            action="append",
            dest="scopes",
            choices=Scope.values,
            help="Repeat for each scope (default: read and act; approve only when given).",
        )
        parser.add_argument(
            "--days",
            type=int,
            default=tokens.DEFAULT_DAYS,
            help=f"Days until it expires (1 to {tokens.MAX_DAYS}, default {tokens.DEFAULT_DAYS}).",
        )

    def handle(
        self, *args: Any, name: str, scopes: list[str] | None, days: int, **options: Any
    ) -> None:
        user = owner.get_owner()
        if user is None:
            raise CommandError("There is no owner account yet; start agentos once (make run).")
        try:
            new = tokens.create_token(owner=user, name=name, scopes=scopes, days=days)
        except DomainError as error:
            raise CommandError(error.message) from None
        self.stderr.write(
            f"Token '{new.token.name}' created (scopes: {', '.join(new.token.scopes)}; expires "
            f"{new.token.expires_at:%Y-%m-%d}); it is shown only this once:"
        )
        self.stdout.write(new.secret)
