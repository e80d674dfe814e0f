"""Calls to a node's runner: JSON-RPC 2.0, one JSON object a line, over an SSH exec channel.

sshd runs the runner as the forced command of our key (`command="…",restrict,from="…"` in the
node's `authorized_keys`), so the command string we send is ignored: the key alone decides what
runs. One paramiko `Transport` (one TCP connection, authenticated once) is kept per node and
each call opens its own channel on it, so concurrent steps on a node are concurrent channels,
each a runner process of its own.

Host keys are pinned: the node's key must be the one registered with it (no trust on first use,
no known_hosts file); a missing or different key is refused before we authenticate.

Failures come in two families the caller treats differently:
- `TransportError` (`NodeLost`, `HostKeyRefused`, `AuthRefused`): the call could not be carried;
  the node is unusable and a step is placed again elsewhere under a new fence.
- `RunnerError` (`StaleFence` among them): the runner answered with a JSON-RPC error.
The local node is called in-process (`LocalEndpoint`), with the same errors.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import paramiko

# The runner package is standard library only: the control plane runs its handler in-process.
from cluster.runner import relay
from cluster.runner.handler import Handler
from cluster.runner.protocol import RpcError

CONNECT_SECONDS = 10.0
# Bounded memory for one answer: a result carries at most `output_bytes` of output (a few MiB);
# a runner that talks more is broken.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
STDERR_TAIL = 2000
RELAY_END_SECONDS = 10.0  # a relay's node end, told its input ended, exits within this

STALE_FENCE = -32010
BUSY = -32011
INVALID_PARAMS = -32602


class TransportError(Exception):
    """The call could not be carried to the node's runner and back."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"node {node}: {message}")
        self.node = node
        self.reason = message


class NodeLost(TransportError):
    """Unreachable, the connection dropped, or no answer before the deadline."""


class HostKeyRefused(TransportError):
    """The node's SSH host key is not the pinned one (or none is pinned)."""


class AuthRefused(TransportError):
    """The node did not accept our key (not in its authorized_keys, or not from this address)."""


class RunnerError(Exception):
    """The runner answered a JSON-RPC error."""

    def __init__(self, node: str, code: int, message: str) -> None:
        super().__init__(f"node {node}: runner error {code}: {message}")
        self.node = node
        self.code = code
        self.message = message


class StaleFence(RunnerError):
    """The runner already accepted a higher fence for this step: this attempt is superseded."""


def runner_error(node: str, code: int, message: str) -> RunnerError:
    return (StaleFence if code == STALE_FENCE else RunnerError)(node, code, message)


class Endpoint(Protocol):
    name: str

    def call(self, method: str, params: dict[str, Any], *, timeout: float) -> Any:
        """The result of `method`, or `TransportError` / `RunnerError`."""
        ...


@dataclass(frozen=True)
class HostKey:
    """A pinned host key, parsed from an OpenSSH public-key line ("ssh-ed25519 AAAA… comment")."""

    kind: str
    blob: bytes

    @classmethod
    def parse(cls, line: str) -> HostKey:
        fields = line.strip().split()
        # A known_hosts or ssh-keyscan line starts with the host: "host ssh-ed25519 AAAA…".
        if len(fields) >= 3 and not _key_type(fields[0]) and _key_type(fields[1]):
            fields = fields[1:]
        if len(fields) < 2:
            raise ValueError("a host key is one line: '<type> <base64 key> [comment]'")
        kind, encoded = fields[0], fields[1]
        try:
            blob = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise ValueError(
                f"the host key's base64 part is not valid base64: {encoded[:20]}…"
            ) from None
        # The blob starts with its own type name: a line whose two disagree was edited by hand.
        try:
            embedded = paramiko.Message(blob).get_text()
        except Exception:  # paramiko raises several types on a short blob
            embedded = ""
        if embedded != kind:
            raise ValueError(f"the host key says type {kind!r} but its key is of type {embedded!r}")
        return cls(kind=kind, blob=blob)

    @property
    def line(self) -> str:
        return f"{self.kind} {base64.b64encode(self.blob).decode()}"

    @property
    def fingerprint(self) -> str:
        digest = base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")
        return f"SHA256:{digest}"

    def negotiable(self) -> tuple[str, ...]:
        # Ask the server for this key's type only, so a server with several host keys shows the
        # one we pinned (RSA keys are offered under their SHA-2 signature names).
        if self.kind == "ssh-rsa":
            return ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")
        return (self.kind,)


def _key_type(word: str) -> bool:
    return word.startswith(("ssh-", "ecdsa-", "sk-", "rsa-"))


class SshEndpoint:
    """A remote node's runner over SSH. Thread-safe: one connection, a channel per call."""

    def __init__(
        self, *, name: str, address: str, port: int, user: str, host_key: str, key: paramiko.PKey
    ) -> None:
        self.name = name
        self.address = address
        self.port = port
        self.user = user
        self.pinned = HostKey.parse(host_key) if host_key.strip() else None
        self.key = key
        self._lock = threading.Lock()
        self._transport: paramiko.Transport | None = None
        self._ids = 0

    def call(self, method: str, params: dict[str, Any], *, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        # The key's forced command runs whatever we ask: this name is for the node's logs.
        transport, channel = self._session("agentos-runner", deadline)
        with channel:
            with self._lock:
                self._ids += 1
                request_id = self._ids
            request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            try:
                channel.sendall(json.dumps(request).encode() + b"\n")
                line, stderr = _read_line(channel, deadline, self.name)
            except TransportError:
                raise
            except (paramiko.SSHException, OSError, EOFError) as error:
                self._drop(transport)
                raise NodeLost(self.name, f"connection failed during {method}: {error}") from error
        return _answer(self.name, request_id, line, stderr)

    @contextlib.contextmanager
    def relay(
        self, *, uid: int, gid: int, dial: Callable[[], socket.socket], timeout: float
    ) -> Iterator[str]:
        """A socket on the node, for `uid`:`gid`, whose every connection is carried here and
        connected by `dial` (`cluster.runner.relay`); yields its path on the node. It lives until
        the block ends."""
        deadline = time.monotonic() + timeout
        # The forced command reads this one (SSH_ORIGINAL_COMMAND) and serves a relay.
        transport, channel = self._session(relay.command(uid, gid), deadline)
        with channel:
            try:
                # Nothing follows the line before a sandbox connects, which needs the line.
                line, stderr = _read_line(channel, deadline, self.name)
                path = json.loads(line)["socket"]
            except TransportError:
                raise
            except (paramiko.SSHException, OSError, EOFError) as error:
                self._drop(transport)
                raise NodeLost(self.name, f"connection failed opening a relay: {error}") from error
            except (ValueError, KeyError, TypeError):
                said = (line + stderr).decode(errors="replace")[:300]
                raise NodeLost(self.name, f"the runner did not open a relay: {said!r}") from None
            channel.settimeout(None)
            mux = relay.Mux(functools.partial(_read_exactly, channel), channel.sendall, dial)
            carrier = threading.Thread(target=mux.serve, name=f"relay-{self.name}", daemon=True)
            carrier.start()
            try:
                yield str(path)
            finally:
                # The end of its input ends the node's relay: it removes its socket and exits
                # (waited for, so the socket is gone when the step's call returns).
                with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                    channel.shutdown_write()
                channel.status_event.wait(RELAY_END_SECONDS)
                channel.close()
                carrier.join(RELAY_END_SECONDS)

    def _session(
        self, command: str, deadline: float
    ) -> tuple[paramiko.Transport, paramiko.Channel]:
        """A new channel on the node's connection, `command` asked of it."""
        transport = self._connected(deadline)
        try:
            channel = transport.open_session(timeout=_left(deadline, self.name))
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as error:
            self._drop(transport)
            raise NodeLost(self.name, f"could not open a channel: {error}") from error
        return transport, channel

    def close(self) -> None:
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    def _connected(self, deadline: float) -> paramiko.Transport:
        with self._lock:
            if self._transport is not None and self._transport.is_active():
                return self._transport
            if self.pinned is None:
                raise HostKeyRefused(
                    self.name, "no host key is registered for this node (node_add --host-key)"
                )
            self._transport = self._connect(self.pinned, deadline)
            return self._transport

    def _connect(self, pinned: HostKey, deadline: float) -> paramiko.Transport:
        try:
            sock = socket.create_connection(
                (self.address, self.port), timeout=min(CONNECT_SECONDS, _left(deadline, self.name))
            )
        except OSError as error:
            raise NodeLost(
                self.name, f"cannot connect to {self.address}:{self.port}: {error}"
            ) from error
        transport = paramiko.Transport(sock)
        try:
            transport.get_security_options().key_types = pinned.negotiable()
            try:
                transport.start_client(timeout=_left(deadline, self.name))
            except (paramiko.SSHException, OSError, EOFError) as error:
                raise NodeLost(self.name, f"SSH handshake failed: {error}") from error
            shown = transport.get_remote_server_key()
            shown_key = HostKey(kind=shown.get_name(), blob=shown.asbytes())
            if shown_key.blob != pinned.blob:
                raise HostKeyRefused(
                    self.name,
                    f"host key mismatch at {self.address}:{self.port}: the server shows "
                    f"{shown_key.kind} {shown_key.fingerprint}, the pinned key is "
                    f"{pinned.kind} {pinned.fingerprint} (a different machine, or its key changed)",
                )
            try:
                transport.auth_publickey(self.user, self.key)
            except paramiko.AuthenticationException as error:
                raise AuthRefused(
                    self.name,
                    f"{self.user}@{self.address} refused the control plane's key ({error}): is "
                    "its line in the node's authorized_keys, with from= this machine's address?",
                ) from error
            except (paramiko.SSHException, OSError, EOFError) as error:
                raise NodeLost(self.name, f"authentication failed: {error}") from error
        except BaseException:
            transport.close()
            raise
        transport.set_keepalive(15)
        return transport

    def _drop(self, transport: paramiko.Transport) -> None:
        with self._lock:
            if self._transport is transport:
                self._transport = None
        transport.close()


_handlers: dict[Path, Handler] = {}
_handlers_lock = threading.Lock()


def local_handler(state: Path, name: str) -> Handler:
    """The runner's request handler for a state directory, one per process (it tracks the
    sandboxes it runs)."""
    with _handlers_lock:
        handler = _handlers.get(state)
        if handler is None:
            handler = _handlers[state] = Handler(state, name)
        return handler


class LocalEndpoint:
    """The control plane's own node: the runner's request handler, called in-process (same state
    files, same fencing as a runner process on a remote node)."""

    def __init__(self, *, name: str, state: Path) -> None:
        self.name = name
        self.state = state

    def call(
        self,
        method: str,
        params: dict[str, Any],
        *,
        timeout: float,
        stopping: threading.Event | None = None,
    ) -> Any:
        try:
            answer = local_handler(self.state, self.name).call(method, params, stopping=stopping)
        except RpcError as error:
            raise runner_error(self.name, error.code, error.message) from None
        # What a remote node would send: JSON values only, no objects shared with the handler.
        return json.loads(json.dumps(answer))


def _left(deadline: float, node: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise NodeLost(node, "no answer before the deadline")
    return left


def _read_line(channel: paramiko.Channel, deadline: float, node: str) -> tuple[bytes, bytes]:
    """The first line the runner writes (its answer) and what it wrote to stderr so far."""
    buffer = bytearray()
    stderr = bytearray()
    while True:
        newline = buffer.find(b"\n")
        if newline >= 0:
            return bytes(buffer[:newline]), bytes(stderr[-STDERR_TAIL:])
        channel.settimeout(min(_left(deadline, node), 1.0))
        with contextlib.suppress(TimeoutError):
            while channel.recv_stderr_ready():
                stderr += channel.recv_stderr(65536)
                del stderr[:-STDERR_TAIL]
        try:
            chunk = channel.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            with contextlib.suppress(OSError):
                while channel.recv_stderr_ready():
                    stderr += channel.recv_stderr(65536)
            tail = bytes(stderr[-STDERR_TAIL:]).decode(errors="replace").strip()
            detail = f" (runner said: {tail})" if tail else ""
            raise NodeLost(node, f"the connection closed before the runner answered{detail}")
        buffer += chunk
        if len(buffer) > MAX_ANSWER_BYTES:
            raise NodeLost(node, f"the runner's answer exceeds {MAX_ANSWER_BYTES} bytes")


def _read_exactly(channel: paramiko.Channel, size: int) -> bytes:
    """`size` bytes from the channel, fewer only at its end."""
    data = bytearray()
    while len(data) < size:
        chunk = channel.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _answer(node: str, request_id: int, line: bytes, stderr: bytes) -> Any:
    try:
        answer = json.loads(line)
    except ValueError:
        tail = stderr.decode(errors="replace").strip()
        raise NodeLost(
            node, f"the runner answered something that is not JSON: {line[:200]!r} {tail}"
        ) from None
    if not isinstance(answer, dict) or answer.get("id") != request_id:
        raise NodeLost(node, f"the runner answered another request: {line[:200]!r}")
    error = answer.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise NodeLost(node, f"the runner's error is not an object: {error!r}")
        raise runner_error(node, int(error.get("code", -32603)), str(error.get("message", "")))
    return answer.get("result")
