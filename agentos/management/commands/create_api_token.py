from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentos import owner, tokens
from agentos.errors import DomainError


class Command(BaseCommand):
    help = "Create a personal API token for the owner and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="What will use the token.")

    def handle(self, *args: Any, name: str, **options: Any) -> None:
        user = owner.get_owner()
        if user is None:
            raise CommandError("There is no owner account yet; start agentos once (make run).")
        try:
            new = tokens.create_token(owner=user, name=name)
        except DomainError as error:
            raise CommandError(error.message) from None
        self.stderr.write(f"Token '{new.token.name}' created; it is shown only this once:")
        self.stdout.write(new.secret)
