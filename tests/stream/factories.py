from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection


@contextmanager
def raw_connection() -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own (not Django's), in explicit transactions."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as conn:
        yield conn


def insert_event(conn: psycopg.Connection[Any], kind: str) -> int:
    row = conn.execute(
        "INSERT INTO kernel_event (at, kind, trust, data) VALUES (now(), %s, 'system', '{}')"
        " RETURNING id",
        (kind,),
    ).fetchone()
    assert row is not None
    return int(row[0])
