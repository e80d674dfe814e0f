"""The event stream over /api/v1: page numbered events by cursor (`kernel.stream`).

The same events, numbers and cursor as the console's WebSocket (`wire` gives both their shape):
a script that polls this endpoint with its last number misses nothing and gets nothing twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from agentos.core.errors import DomainError
from kernel import stream

router = Router(tags=["events"])

# Event numbers are PostgreSQL bigints: a larger cursor is refused as invalid input, not
# passed on to fail in the database.
MAX_NUMBER = 2**63 - 1


class PageQuery(Schema):
    after: int = Field(0, ge=0, le=MAX_NUMBER, description="the last event number you have")
    limit: int = Field(100, ge=1, le=500)


def wire(event: stream.StreamEvent) -> dict[str, Any]:
    """An event as clients read it: the kernel's account of the event's run is, for the owner,
    its mission (a mission is the account its runs are charged to, with the same id)."""
    data: dict[str, Any] = dict(event)
    data["mission"] = data.pop("account")
    return data


class EventOut(Schema):
    number: int
    at: datetime
    kind: str
    mission: int | None = Field(description="the mission of the event's run")
    run: int | None
    seq: int | None
    trust: str
    data: dict[str, Any]
    wait: dict[str, Any] | None = Field(
        None, description="wait.opened only: what the run waits for (approval, question...)"
    )


class PageOut(Schema):
    events: list[EventOut]
    next: int = Field(description="the cursor for the next page: the last number returned")
    head: int = Field(description="the highest event number so far")


@router.get(
    "",
    response=PageOut,
    summary="Events after a cursor, in order (409 cursor_ahead when the cursor is past the head)",
)
def list_events(request: HttpRequest, query: Query[PageQuery]) -> dict[str, Any]:
    stream.sequence()
    head = stream.head()
    if query.after > head:
        raise DomainError(
            f"Event {query.after} does not exist yet; the last one is {head}.",
            code="cursor_ahead",
            status=409,
            details={"head": head},
        )
    events = [wire(event) for event in stream.page(query.after, query.limit)]
    return {
        "events": events,
        "next": events[-1]["number"] if events else query.after,
        "head": head,
    }
