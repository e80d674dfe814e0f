"""A database that does not answer, for this process only: its connection pointed where nothing
listens, so each query meets a real refused connection, as with the server down.
`tests/chaos/test_database_outage` stops the real server under the real stack."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connections

from tests.live import free_port


@contextlib.contextmanager
def database_unreachable() -> Iterator[None]:
    """Until the block ends, this thread's default connection reaches no server."""
    connection = connections["default"]
    connection.close()
    saved = dict(connection.settings_dict)
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
