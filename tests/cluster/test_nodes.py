"""Nodes over real SSH: three test nodes (network namespaces, each with its own sshd and runner)
shared by the whole module; the control plane reaches them with its vault-kept key."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from django.conf import settings
from pytest_django import DjangoDbBlocker

from cluster import nodes, testhosts, transport
from cluster.models import ControlKey, Node

NAMES = ["n1", "n2", "n3"]


@pytest.fixture(scope="module")
def hosts(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker
) -> Iterator[testhosts.TestHosts]:
    with django_db_blocker.unblock():
        line = nodes.public_key_line()
    started = testhosts.start(
        names=NAMES, base=Path(settings.DATA_DIR) / "testnodes", public_key_line=line
    )
    try:
        yield started
    finally:
        nodes.close_all()
        started.stop()


@pytest.fixture(scope="module")
def key_row(hosts: testhosts.TestHosts, django_db_blocker: DjangoDbBlocker) -> ControlKey:
    with django_db_blocker.unblock():
        return ControlKey.objects.get(pk=1)


@pytest.fixture
def cluster_nodes(hosts: testhosts.TestHosts, key_row: ControlKey, db: None) -> list[Node]:
    """The three nodes registered with their pinned host keys (in the test's transaction)."""
    # A flush by another module's transactional test may have dropped the key the nodes trust.
    ControlKey.objects.update_or_create(
        pk=1, defaults={"ciphertext": key_row.ciphertext, "public_line": key_row.public_line}
    )
    return [
        nodes.add_node(name=host.name, address=host.node_ip, port=host.port, host_key=host.host_key)
        for host in hosts.nodes
    ]


def test_it_refuses_a_node_whose_host_key_is_not_the_pinned_one(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node]
) -> None:
    other = hosts.node("n2").host_key
    node = nodes.pin_host_key(node=cluster_nodes[0], host_key=other)
    with pytest.raises(transport.HostKeyRefused, match="host key mismatch") as refused:
        nodes.call(node, "hello", {}, timeout=10)
    assert transport.HostKey.parse(other).fingerprint in str(refused.value)
    node.refresh_from_db()
    assert node.status == Node.Status.LOST
    assert "host key mismatch" in node.lost_reason


def test_it_refuses_a_node_without_a_pinned_host_key(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node]
) -> None:
    host = hosts.node("n1")
    bare = nodes.add_node(name="bare", address=host.node_ip, port=host.port)
    with pytest.raises(transport.HostKeyRefused, match="no host key is registered"):
        nodes.call(bare, "hello", {}, timeout=10)


def test_it_is_refused_by_a_node_when_connecting_from_another_address(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node]
) -> None:
    """The key's from= names the control plane's address on n1's link; the same key from the
    address of n3's link (still this machine) is refused by sshd."""
    n1, n3 = hosts.node("n1"), hosts.node("n3")
    sock = socket.create_connection(
        (n1.node_ip, n1.port), timeout=5, source_address=(n3.host_ip, 0)
    )
    client = paramiko.Transport(sock)
    try:
        client.start_client(timeout=5)
        with pytest.raises(paramiko.AuthenticationException):
            client.auth_publickey("root", nodes.control_key())
    finally:
        client.close()
    # From the right address the same key is accepted.
    sock = socket.create_connection(
        (n1.node_ip, n1.port), timeout=5, source_address=(n1.host_ip, 0)
    )
    client = paramiko.Transport(sock)
    try:
        client.start_client(timeout=5)
        client.auth_publickey("root", nodes.control_key())
        assert client.is_authenticated()
    finally:
        client.close()
