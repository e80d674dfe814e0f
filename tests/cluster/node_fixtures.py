"""Three SSH test nodes (`cluster.proving.testhosts`: network and mount namespaces, each with its
own sshd, runner and filesystem root) shared by a test module, registered for each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from pytest_django import DjangoDbBlocker

from cluster import nodes, shipping
from cluster.models import ControlKey, Node
from cluster.proving import testhosts

NAMES = ["n1", "n2", "n3"]


@pytest.fixture(scope="module")
def hosts(
    request: pytest.FixtureRequest, django_db_setup: None, django_db_blocker: DjangoDbBlocker
) -> Iterator[testhosts.TestHosts]:
    with django_db_blocker.unblock():
        line = nodes.public_key_line()
    base = Path(settings.DATA_DIR) / "testnodes" / request.module.__name__.rsplit(".", 1)[-1]
    started = testhosts.start(names=NAMES, base=base, public_key_line=line)
    try:
        yield started
    finally:
        nodes.close_all()
        started.stop()


@pytest.fixture(scope="module")
def key_row(hosts: testhosts.TestHosts, django_db_blocker: DjangoDbBlocker) -> ControlKey:
    with django_db_blocker.unblock():
        return ControlKey.objects.get(pk=1)


@pytest.fixture(scope="module")
def hellos() -> dict[str, dict[str, Any]]:
    """Each node's last `hello` answer: a test reuses what an earlier one collected (placement
    would otherwise ask every node again for each test's fresh rows)."""
    return {}


@pytest.fixture
def cluster_nodes(
    hosts: testhosts.TestHosts, key_row: ControlKey, hellos: dict[str, dict[str, Any]], db: None
) -> Iterator[list[Node]]:
    """The three nodes registered with their pinned host keys (in the test's transaction)."""
    # A flush by another module's transactional test may have dropped the key the nodes trust.
    ControlKey.objects.update_or_create(
        pk=1, defaults={"ciphertext": key_row.ciphertext, "public_line": key_row.public_line}
    )
    registered = []
    for host in hosts.nodes:
        node = nodes.add_node(
            name=host.name, address=host.node_ip, port=host.port, host_key=host.host_key
        )
        if host.name in hellos:
            nodes.record_hello(node=node, answer=hellos[host.name])
        registered.append(node)
    yield registered
    # Connections are per node name and outlive the test's transaction: each test starts afresh.
    nodes.close_all()
    for node in Node.objects.filter(name__in=NAMES, status=Node.Status.UP):
        hellos[node.name] = node.telemetry


def on_nodes(hosts: testhosts.TestHosts, workdir: Path, name: str) -> list[Path]:
    """`name` in each node's own copy of worktree `workdir` that holds it. The nodes share no
    filesystem with the control plane; their roots are directories of this machine, so the test,
    as someone on the node would, looks at the copy where the node keeps it."""
    tree = shipping.tree_name(workdir)
    copies = [host.state / "trees" / tree / "copy" / name for host in hosts.nodes]
    return [path for path in copies if path.exists()]
