"""Domain errors: raised by services, mapped to HTTP answers in one place (`agentos.api`)."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """An error the caller can act on; `message` is safe to show to the owner."""

    status = 400
    code = "invalid_input"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.details = details
