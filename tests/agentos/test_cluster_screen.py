"""The Cluster screen: every node with its telemetry and when it was collected, its runner's
version and levels, what is lost and why, and the sandboxes running now with the step each
serves; one tap asks every node again (the local node's real runner answers)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from cluster import nodes
from cluster.models import Node, Placement


def test_it_lists_the_nodes_and_the_sandboxes_running_now(owner_client: Client) -> None:
    local = nodes.local_node()
    lost = Node.objects.create(
        name="n9",
        address="10.9.0.2",
        status=Node.Status.LOST,
        lost_at=timezone.now(),
        lost_reason="connection refused",
    )
    Placement.objects.create(step_id="run-41-0-7", key="k1", node=local, fence=3)
    Placement.objects.create(
        step_id="run-41-0-6", key="k0", node=local, fence=2, status=Placement.Status.DONE
    )

    content = owner_client.get("/cluster/").content.decode()

    assert 'id="node-local"' in content
    assert "this machine (no SSH)" in content
    assert f'id="node-{lost.name}"' in content
    assert "10.9.0.2:22" in content
    assert "connection refused" in content
    assert '<a href="/runs/41/">run 41, step 7</a>' in content
    assert "step 6" not in content  # ended: no sandbox any more
    assert "fence 3" in content
    assert content.count("None running.") == 1  # n9


def test_asking_again_collects_the_local_runners_telemetry(owner_client: Client) -> None:
    response = owner_client.post("/cluster/")

    assert response.status_code == 302
    local = Node.objects.get(name="local")
    assert local.status == Node.Status.UP
    assert local.runner_version
    assert local.telemetry_at is not None
    content = owner_client.get("/cluster/").content.decode()
    assert f"<code>{local.runner_version}</code>" in content
    assert " CPUs</dd>" in content
    assert local.telemetry_at.strftime("%Y-%m-%d %H:%M") in content


@pytest.mark.parametrize("method", ["put", "delete"])
def test_it_refuses_other_methods(owner_client: Client, method: str) -> None:
    assert getattr(owner_client, method)("/cluster/").status_code == 405
