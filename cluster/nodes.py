"""The node registry: adding nodes, the control plane's SSH key, reaching a node's runner and
collecting its telemetry.

The node `local` is the control plane's own machine, always present (`local_node()`), called
in-process; every other node is reached over SSH (`cluster.transport`) with the one key of the
control plane, kept encrypted by the vault and made on first use. A node trusts that key through
one `authorized_keys` line (`authorized_keys_line`) that forces the runner command, so the key
opens nothing else on the node.
"""

from __future__ import annotations

import io
import ipaddress
import re
import shlex
import threading
from pathlib import Path
from typing import Any

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agentos.core import vault
from cluster import transport
from cluster.models import LOCAL, NAME_PATTERN, ControlKey, Node

KEY_COMMENT = "agentos-control-plane"
# Where the runner lives on a remote node unless told otherwise: `runner/` (its versions and the
# `current` link) and `state/` (fences, results, environments).
DEFAULT_NODE_ROOT = "/var/lib/agentos-node"
HELLO_SECONDS = 60.0
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class NodeError(Exception):
    """A node cannot be registered or reached as asked; the message says which field is wrong."""


def local_state() -> Path:
    """The local node's runner state (fences, results, environments)."""
    return Path(settings.DATA_DIR) / "node"


def local_node() -> Node:
    node, _ = Node.objects.get_or_create(name=LOCAL, defaults={"address": ""})
    return node


def add_node(
    *,
    name: str,
    address: str,
    port: int = 22,
    ssh_user: str = "root",
    host_key: str = "",
    replace: bool = False,
) -> Node:
    """Register a remote node; its host key line (if given) is pinned. With `replace`, a node of
    that name takes the new address, user and key (its placements stay)."""
    if not re.match(NAME_PATTERN, name):
        raise NodeError(
            f"node name {name!r}: use lowercase letters, digits and inner dashes, at most 63"
        )
    if name == LOCAL:
        raise NodeError(f"node name {LOCAL!r} is the control plane's own node, always present")
    if not address or any(ch.isspace() or ch in "\"',;" for ch in address):
        raise NodeError(f"node address {address!r}: a host name or an IP address")
    if not 1 <= port <= 65535:
        raise NodeError(f"node port {port}: between 1 and 65535")
    if not _USER.match(ssh_user):
        raise NodeError(f"ssh user {ssh_user!r}: a Unix user name")
    key_line = ""
    if host_key.strip():
        try:
            key_line = transport.HostKey.parse(host_key).line
        except ValueError as error:
            raise NodeError(f"host key: {error}") from None
    node = Node(name=name, address=address, port=port, ssh_user=ssh_user, host_key=key_line)
    try:
        node.full_clean(validate_unique=False)  # the name: below, by the database
    except ValidationError as error:
        raise NodeError(f"node {name}: {error.message_dict}") from None
    if replace:
        node, _ = Node.objects.update_or_create(
            name=name,
            defaults={
                "address": address,
                "port": port,
                "ssh_user": ssh_user,
                "host_key": key_line,
                "enabled": True,
                "status": Node.Status.UNKNOWN,
            },
        )
        _forget(name)
        return node
    try:
        with transaction.atomic():
            node.save()
    except IntegrityError:
        raise NodeError(f"a node named {name!r} already exists") from None
    return node


def pin_host_key(*, node: Node, host_key: str) -> Node:
    """Replace a node's pinned host key (after the owner checked the new one on the machine)."""
    try:
        line = transport.HostKey.parse(host_key).line
    except ValueError as error:
        raise NodeError(f"host key: {error}") from None
    Node.objects.filter(pk=node.pk).update(host_key=line)
    _forget(node.name)
    node.refresh_from_db()
    return node


def set_enabled(*, node: Node, enabled: bool) -> None:
    Node.objects.filter(pk=node.pk).update(enabled=enabled)


# --- the control plane's key ---------------------------------------------------------------


def control_key() -> paramiko.PKey:
    """The control plane's SSH private key, made (Ed25519) and stored encrypted on first use."""
    row = ControlKey.objects.filter(pk=1).first()
    if row is None:
        private = Ed25519PrivateKey.generate()
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()
        key = paramiko.Ed25519Key(file_obj=io.StringIO(pem))
        try:
            with transaction.atomic():
                ControlKey.objects.create(
                    pk=1,
                    ciphertext=vault.encrypt(pem),
                    public_line=f"{key.get_name()} {key.get_base64()} {KEY_COMMENT}",
                )
        except IntegrityError:
            pass  # made concurrently by another process: theirs is the key
        row = ControlKey.objects.get(pk=1)
    return paramiko.Ed25519Key(file_obj=io.StringIO(vault.decrypt(bytes(row.ciphertext))))


def public_key_line() -> str:
    control_key()
    return ControlKey.objects.get(pk=1).public_line


def runner_command(*, name: str, root: str = DEFAULT_NODE_ROOT, python: str = "python3") -> str:
    """The forced command that starts the runner on a node rooted at `root`."""
    base = Path(root)
    # cd resolves `current` once: a process keeps the version it started with while a newer one
    # is swapped in for the next connection.
    return (
        f"cd {shlex.quote(str(base / 'runner' / 'current'))} && exec {shlex.quote(python)} -m "
        f"cluster.runner --state {shlex.quote(str(base / 'state'))} --node {shlex.quote(name)}"
    )


def authorized_keys_line(
    *,
    name: str,
    from_address: str | None,
    root: str = DEFAULT_NODE_ROOT,
    python: str = "python3",
    public_line: str | None = None,
) -> str:
    """The line for root's `authorized_keys` on node `name`: the runner only, no pty, no
    forwarding, and only from the control plane's address (a placeholder when not given)."""
    if from_address is None:
        source = "<control plane address>"
    else:
        try:
            ipaddress.ip_network(from_address, strict=False)
        except ValueError:
            raise NodeError(
                f"from address {from_address!r}: the control plane's IP address (or network)"
            ) from None
        source = from_address
    command = runner_command(name=name, root=root, python=python)
    escaped = command.replace("\\", "\\\\").replace('"', '\\"')
    return f'command="{escaped}",restrict,from="{source}" {public_line or public_key_line()}'


# --- reaching runners ------------------------------------------------------------------------

_endpoints: dict[tuple[str, str, int, str, str], transport.SshEndpoint] = {}
_endpoints_lock = threading.Lock()


def endpoint(node: Node) -> transport.Endpoint:
    """The node's runner, reusing one SSH connection per node and settings."""
    if node.is_local:
        return transport.LocalEndpoint(name=LOCAL, state=local_state())
    identity = (node.name, node.address, node.port, node.ssh_user, node.host_key)
    with _endpoints_lock:
        found = _endpoints.get(identity)
        if found is None:
            for stale in [k for k in _endpoints if k[0] == node.name]:
                _endpoints.pop(stale).close()
            found = transport.SshEndpoint(
                name=node.name,
                address=node.address,
                port=node.port,
                user=node.ssh_user,
                host_key=node.host_key,
                key=control_key(),
            )
            _endpoints[identity] = found
        return found


def close_all() -> None:
    with _endpoints_lock:
        endpoints = list(_endpoints.values())
        _endpoints.clear()
    for found in endpoints:
        found.close()


def _forget(name: str) -> None:
    with _endpoints_lock:
        for stale in [k for k in _endpoints if k[0] == name]:
            _endpoints.pop(stale).close()


def hello(node: Node) -> Node:
    """Ask the node's runner `hello`; record its telemetry (up) or why it cannot answer (lost).
    Raises the transport or runner error after recording it."""
    try:
        answer = endpoint(node).call("hello", {}, timeout=HELLO_SECONDS)
    except transport.TransportError as error:
        mark_lost(node=node, reason=error.reason)
        raise
    if not isinstance(answer, dict):
        raise NodeError(f"node {node.name}: hello answered {answer!r}, not an object")
    was_lost = Node.objects.filter(pk=node.pk, status=Node.Status.LOST).exists()
    node = record_hello(node=node, answer=answer)
    if was_lost:
        from cluster import dispatch  # a cycle: cluster.dispatch imports this module

        dispatch.rejoin(node)
    return node


def record_hello(*, node: Node, answer: dict[str, Any]) -> Node:
    """The node is up, with this `hello` answer as its telemetry, collected now. Only the
    protocol's fields are kept, each of its type and bounded: a node is not trusted to send
    what the registry stores."""
    kept = _hello_fields(node, answer)
    Node.objects.filter(pk=node.pk).update(
        status=Node.Status.UP,
        telemetry=kept,
        telemetry_at=timezone.now(),
        runner_version=kept["runner_version"],
        levels=[item["level"] for item in kept["levels"] if item["available"]],
        lost_at=None,
        lost_reason="",
    )
    node.refresh_from_db()
    return node


TELEMETRY_FIELDS = ("collected_at", "load1", "cpus", "mem_total", "mem_available", "disk_free")


def _hello_fields(node: Node, answer: dict[str, Any]) -> dict[str, Any]:
    def number(value: Any) -> int | float | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        return value if ok else None

    levels = answer.get("levels")
    if not isinstance(levels, list):
        raise NodeError(f"node {node.name}: hello's levels is not a list")
    values = answer.get("telemetry")
    if not isinstance(values, dict):
        values = {}
    return {
        "protocol": number(answer.get("protocol")),
        "runner_version": str(answer.get("runner_version", ""))[:64],
        "node": str(answer.get("node", ""))[:63],
        "levels": [
            {
                "level": item["level"],
                "available": item.get("available") is True,
                "why": str(item.get("why", ""))[:500],
            }
            for item in levels[:10]
            if isinstance(item, dict) and type(item.get("level")) is int
        ],
        "telemetry": {key: number(values.get(key)) for key in TELEMETRY_FIELDS},
        "sandboxes": number(answer.get("sandboxes")),
    }


def refresh_all() -> dict[str, str]:
    """`hello` on every enabled node; the name of each node and "up" or why not."""
    local_node()
    report: dict[str, str] = {}
    for node in Node.objects.filter(enabled=True):
        try:
            hello(node)
            report[node.name] = "up"
        except (transport.TransportError, transport.RunnerError, NodeError) as error:
            report[node.name] = str(error)
    return report


def mark_lost(*, node: Node, reason: str) -> None:
    Node.objects.filter(pk=node.pk).update(
        status=Node.Status.LOST, lost_at=timezone.now(), lost_reason=reason[:2000]
    )
    _forget(node.name)
    node.refresh_from_db()


def call(node: Node, method: str, params: dict[str, Any], *, timeout: float) -> Any:
    """One runner call; a transport failure marks the node lost before it is raised."""
    try:
        return endpoint(node).call(method, params, timeout=timeout)
    except transport.TransportError as error:
        mark_lost(node=node, reason=error.reason)
        raise
