from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.providers.wire import WireServer, wire_server


@pytest.fixture(scope="module")
def shared_server() -> Iterator[WireServer]:
    # One server per module: stopping one costs half a second (serve_forever's poll).
    with wire_server() as server:
        yield server


@pytest.fixture
def server(shared_server: WireServer) -> WireServer:
    """The module's server, with no answer queued and nothing received yet."""
    shared_server.answers.clear()
    shared_server.received.clear()
    return shared_server
