"""Deploying the runner to the nodes: the tree of `cluster/runner` sent to each node's `install`
(validated there, then swapped in atomically; steps running keep their version, environments
are never touched)."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cluster import nodes, transport
from cluster.models import LOCAL, Node
from cluster.runner import deploy as runner_deploy

INSTALL_SECONDS = 120.0


def runner_tree() -> dict[str, bytes]:
    """This checkout's runner, by path relative to a version's directory."""
    return runner_deploy.source_files()


def digest_of(tree: dict[str, bytes]) -> str:
    return runner_deploy.tree_digest(tree)


def version_of(tree: dict[str, bytes]) -> str:
    # Named by content: deploying the same tree twice installs nothing new.
    return digest_of(tree)[:16]


def install_params(tree: dict[str, bytes]) -> dict[str, Any]:
    return {
        "version": version_of(tree),
        "files": {path: base64.b64encode(content).decode() for path, content in tree.items()},
        "digest": digest_of(tree),
    }


def deploy(node: Node, *, tree: dict[str, bytes] | None = None) -> dict[str, Any]:
    """Install the checkout's runner (or `tree`) on `node`; the runner answers {previous,
    current}."""
    params = install_params(runner_tree() if tree is None else tree)
    answer: dict[str, Any] = nodes.call(node, "install", params, timeout=INSTALL_SECONDS)
    return answer


def deploy_all(*, tree: dict[str, bytes] | None = None) -> dict[str, str]:
    """Install the runner on every enabled remote node at once (each validates and self-tests
    the tree before swapping it in); each node's name and "previous -> current", or why not."""
    params = install_params(runner_tree() if tree is None else tree)
    targets = [
        (node, nodes.endpoint(node))
        for node in Node.objects.filter(enabled=True).exclude(name=LOCAL)
    ]
    report: dict[str, str] = {}
    # Threads only wait on the network; the database is used from this thread alone.
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="deploy") as pool:
        calls = [
            (node, pool.submit(endpoint.call, "install", params, timeout=INSTALL_SECONDS))
            for node, endpoint in targets
        ]
        for node, call in calls:
            try:
                answer = call.result()
                report[node.name] = f"{answer.get('previous')} -> {answer.get('current')}"
            except transport.TransportError as error:
                nodes.mark_lost(node=node, reason=error.reason)
                report[node.name] = f"failed: {error}"
            except transport.RunnerError as error:
                report[node.name] = f"failed: {error}"
    return report
