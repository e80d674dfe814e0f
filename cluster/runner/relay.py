"""A run's egress socket on a node that is not the control plane's machine.

The egress service (`cluster/egress.py`) listens on one Unix socket per run, on the control
plane. A sandbox on another node reaches it through a relay: the control plane opens an SSH
session whose command is `agentos-relay UID GID`; the node's forced command (this runner) sees it
in `SSH_ORIGINAL_COMMAND`, binds a socket of its own for that uid (0600, under the state
directory), prints its path as one JSON line, then carries every connection the sandbox makes to
it over the session, multiplexed, to the control plane, which connects each to the run's socket
there. Nodes never connect to the control plane: the session is the control plane's.

Both ends run `Mux` (the control plane imports it: standard library only). A frame is a header
(connection id u32, kind u8, length u32, big-endian) and its payload:
`OPEN` (node to control plane: a sandbox connected), `DATA` (either way), `EOF` (either way: the
sender will send no more on that connection; the receiver shuts its socket's writing half).
A connection is closed once both of its directions ended. The end of the session closes every
connection and, on the node, removes the socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

COMMAND = "agentos-relay"
OPEN, DATA, EOF = 1, 2, 3
HEADER = struct.Struct(">IBI")
CHUNK = 64 * 1024
BACKLOG = 64
_ARGUMENTS = re.compile(r"agentos-relay (\d{1,10}) (\d{1,10})")
# The per-run uids the protocol accepts in a profile (`protocol.parse_profile`), root excluded.
LOWEST_UID, HIGHEST_UID = 1, 2**32 - 3


def command(uid: int, gid: int) -> str:
    """The SSH command that asks a node for a relay owned by `uid`:`gid`."""
    return f"{COMMAND} {uid} {gid}"


def parse_command(line: str) -> tuple[int, int] | None:
    """(uid, gid) of a relay command, None when `line` is not one; ValueError when it is one with
    ids out of range."""
    if not line.startswith(COMMAND):
        return None
    match = _ARGUMENTS.fullmatch(line.strip())
    if match is None:
        raise ValueError(f"a relay command is '{COMMAND} UID GID', not {line[:80]!r}")
    uid, gid = int(match[1]), int(match[2])
    for name, value in (("uid", uid), ("gid", gid)):
        if not LOWEST_UID <= value <= HIGHEST_UID:
            raise ValueError(f"relay {name} {value} is outside {LOWEST_UID}..{HIGHEST_UID}")
    return uid, gid


class Mux:
    """Connections carried over one byte stream (`read(n)`: exactly n bytes or fewer at its end;
    `write(data)`: all of it). `dial`, on the end that answers `OPEN`, connects a new one."""

    def __init__(
        self,
        read: Callable[[int], bytes],
        write: Callable[[bytes], None],
        dial: Callable[[], socket.socket] | None = None,
    ) -> None:
        self._read = read
        self._write = write
        self._dial = dial
        self._sending = threading.Lock()
        self._lock = threading.Lock()
        self._connections: dict[int, _Connection] = {}
        self._ids = 0
        self.closed = threading.Event()

    def adopt(self, sock: socket.socket) -> None:
        """Carry a connection accepted on this end (announced to the other as `OPEN`)."""
        with self._lock:
            self._ids += 1
            ident = self._ids
        connection = self._register(ident, sock)  # before OPEN: its answer may come at once
        self._send(ident, OPEN)
        self._pump_in_thread(ident, connection)

    def serve(self) -> None:
        """Deliver the other end's frames until the stream ends; then close every connection."""
        try:
            while header := self._read(HEADER.size):
                if len(header) < HEADER.size:
                    break
                ident, kind, length = HEADER.unpack(header)
                if length > CHUNK:
                    break  # not our framing: stop carrying anything
                payload = self._read(length) if length else b""
                if len(payload) < length:
                    break
                self._deliver(ident, kind, payload)
        except OSError:
            pass
        finally:
            self.closed.set()
            with self._lock:
                connections = list(self._connections.values())
                self._connections.clear()
            for connection in connections:
                connection.close()

    def _deliver(self, ident: int, kind: int, payload: bytes) -> None:
        if kind == OPEN and self._dial is not None:
            try:
                sock = self._dial()
            except OSError:
                self._send(ident, EOF)
                return
            self._pump_in_thread(ident, self._register(ident, sock))
            return
        with self._lock:
            connection = self._connections.get(ident)
        if connection is None:
            return  # closed on this end already
        if kind == DATA:
            connection.receive(payload)
        elif kind == EOF:
            connection.received_eof()
        if connection.finished():
            self._forget(ident)

    def _register(self, ident: int, sock: socket.socket) -> _Connection:
        connection = _Connection(sock)
        with self._lock:
            self._connections[ident] = connection
        return connection

    def _pump_in_thread(self, ident: int, connection: _Connection) -> None:
        threading.Thread(
            target=self._pump, args=(ident, connection), name=f"relay-{ident}", daemon=True
        ).start()

    def _pump(self, ident: int, connection: _Connection) -> None:
        """This end's socket to the other end, until it ends."""
        try:
            while data := connection.sock.recv(CHUNK):
                self._send(ident, DATA, data)
        except OSError:
            pass
        connection.sent_eof = True
        with contextlib.suppress(OSError):
            self._send(ident, EOF)
        if connection.finished():
            self._forget(ident)

    def _forget(self, ident: int) -> None:
        with self._lock:
            connection = self._connections.pop(ident, None)
        if connection is not None:
            connection.close()

    def _send(self, ident: int, kind: int, payload: bytes = b"") -> None:
        with self._sending:
            self._write(HEADER.pack(ident, kind, len(payload)) + payload)


class _Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sent_eof = False
        self.got_eof = False

    def receive(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self.received_eof()  # the reader went away: what follows has nowhere to go

    def received_eof(self) -> None:
        self.got_eof = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def finished(self) -> bool:
        return self.sent_eof and self.got_eof

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def serve(state: Path, uid: int, gid: int, inbound: BinaryIO, outbound: BinaryIO) -> None:
    """The node's end: bind the socket, say where, carry its connections until `inbound` ends."""
    directory = state / "relay"
    directory.mkdir(mode=0o711, parents=True, exist_ok=True)  # the sandbox's uid passes through
    path = directory / f"{secrets.token_hex(8)}.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        path.chmod(0o600)
        if os.geteuid() == 0:
            os.chown(path, uid, gid)
        listener.listen(BACKLOG)
        outbound.write(json.dumps({"socket": str(path)}).encode() + b"\n")
        outbound.flush()

        def write(data: bytes) -> None:
            outbound.write(data)
            outbound.flush()

        mux = Mux(inbound.read, write)

        def accept() -> None:
            while not mux.closed.is_set():
                try:
                    sock, _ = listener.accept()
                except OSError:
                    return  # closed below
                try:
                    mux.adopt(sock)
                except OSError:
                    sock.close()
                    return  # the session is gone

        threading.Thread(target=accept, name="relay-accept", daemon=True).start()
        mux.serve()
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
