"""Doorbells to the owner's open pages, rung only after the state they announce is committed.

The channel layer may drop a message (channels-postgres loses sends in its start-up window), so a
doorbell only says "look again": pages re-read state from the database when it rings.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

OWNER_GROUP = "owner"
logger = logging.getLogger(__name__)


def ring_on_commit(kind: str, **data: Any) -> None:
    """After the current transaction commits, tell open consoles that `kind` changed."""
    transaction.on_commit(lambda: ring(kind, **data))


def ring(kind: str, **data: Any) -> None:
    """Send in the background: a broken channel layer (its database restarting) can take its
    pool's timeout to fail, and a worker's step or an owner's request must never wait for it.
    (In-process tests use the in-memory layer, which only works from the caller's thread.)"""
    if settings.DOORBELLS_IN_BACKGROUND:
        _sender.submit(_send, kind, data)
    else:
        _send(kind, data)


# One sender thread: doorbells are rare, their order does not matter, and a stuck send must
# not pile up threads.
_sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="doorbell")


def _send(kind: str, data: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:  # channels swallows layer construction errors and hands back None
        logger.warning("no channel layer configured; doorbell %s not sent", kind)
        return
    try:
        async_to_sync(layer.group_send)(OWNER_GROUP, {"type": "doorbell", "kind": kind, **data})
    except Exception as error:
        # A lost doorbell costs a page a refresh, never state: note it and go on.
        logger.warning("doorbell %s not sent: %s: %s", kind, error.__class__.__name__, error)
