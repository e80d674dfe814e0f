from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agentos import credentials
from agentos.core import owner


class Command(BaseCommand):
    help = (
        "Issue a new password, TOTP secret and backup codes for the owner (old ones stop working) "
        "and revoke every API token."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            new = owner.reset_owner()
        except LookupError as error:
            raise CommandError(str(error)) from None
        host = os.environ.get("AGENTOS_HOST", "127.0.0.1")
        port = os.environ.get("AGENTOS_PORT", "8000")
        self.stdout.write(credentials.render(new, url=f"http://{host}:{port}"))
        self.stdout.write(f"{new.tokens_revoked} API tokens revoked.")
