"""The relay's multiplexing (`cluster.runner.relay`), both ends in this process over a socket
pair, the far end dialing a real Unix server; the relay over SSH is tested with the test nodes
(tests/cluster/test_nodes.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cluster.runner import relay


class Upper:
    """A Unix server that answers, once its client has finished sending, what it sent in capitals
    (the client's half-close must cross the relay for it to answer)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        with conn:
            received = b""
            while chunk := conn.recv(65536):
                received += chunk
            conn.sendall(received.upper())


@pytest.fixture
def carried(tmp_path: Path) -> Iterator[tuple[Callable[[], socket.socket], Path]]:
    """(connect: a new connection at the near end, the far server's path); the two muxes run
    over a socket pair, as the runner and the control plane over an SSH session."""
    server = Upper(tmp_path / "far.sock")
    near_link, far_link = socket.socketpair()

    def reader(link: socket.socket) -> Callable[[int], bytes]:
        def read(size: int) -> bytes:
            data = b""
            while len(data) < size and (chunk := link.recv(size - len(data))):
                data += chunk
            return data

        return read

    def dial() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(server.path))
        return sock

    near = relay.Mux(reader(near_link), near_link.sendall)
    far = relay.Mux(reader(far_link), far_link.sendall, dial)
    threads = [threading.Thread(target=mux.serve, daemon=True) for mux in (near, far)]
    for thread in threads:
        thread.start()

    def connect() -> socket.socket:
        ours, theirs = socket.socketpair()
        near.adopt(theirs)
        return ours

    yield connect, server.path
    for link in (near_link, far_link):
        link.shutdown(socket.SHUT_RDWR)
    for thread in threads:
        thread.join(5)
    server.listener.close()
    assert near.closed.is_set()
    assert far.closed.is_set()


def exchange(sock: socket.socket, data: bytes) -> bytes:
    with sock:
        sock.settimeout(10)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_it_carries_connections_at_once_each_with_its_half_close(
    carried: tuple[Callable[[], socket.socket], Path],
) -> None:
    connect, _ = carried
    payloads = [bytes([97 + n]) * (200_000 + n) for n in range(6)]  # several frames each
    answers: dict[int, bytes] = {}
    threads = [
        threading.Thread(target=lambda n=n: answers.update({n: exchange(connect(), payloads[n])}))
        for n in range(len(payloads))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == {n: payload.upper() for n, payload in enumerate(payloads)}


def test_a_connection_the_far_end_cannot_dial_ends_at_once(
    carried: tuple[Callable[[], socket.socket], Path],
) -> None:
    connect, far = carried
    far.unlink()  # the run's socket is gone (its tree stopped)
    assert exchange(connect(), b"anyone there?") == b""


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("agentos-runner", None),
        ("", None),
        ("agentos-relay 2000000001 2000000001", (2000000001, 2000000001)),
    ],
)
def test_it_reads_its_command(line: str, expected: tuple[int, int] | None) -> None:
    assert relay.parse_command(line) == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("agentos-relay 0 0", "relay uid 0 is outside"),
        ("agentos-relay 12 x", "a relay command is 'agentos-relay UID GID'"),
        ("agentos-relay 12 13; rm -rf /", "a relay command is"),
    ],
)
def test_it_refuses_a_malformed_command_precisely(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        relay.parse_command(line)
