"""Deploying the runner to the nodes: the tree of `cluster/runner` sent to each node's `install`
(validated there, then swapped in atomically; steps running keep their version, environments
are never touched)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import cluster
from cluster import nodes, transport
from cluster.models import Node

INSTALL_SECONDS = 120.0


def runner_tree() -> dict[str, bytes]:
    """The files a node needs to run `python3 -m cluster.runner`, by path relative to the
    version's directory."""
    top = Path(cluster.__file__).resolve().parent
    tree = {"cluster/__init__.py": b""}
    for path in sorted((top / "runner").rglob("*.py")):
        tree[str(path.relative_to(top.parent))] = path.read_bytes()
    return tree


def digest_of(tree: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for relative in sorted(tree):
        content = tree[relative]
        digest.update(f"{len(relative)}:{relative}:{len(content)}:".encode() + content)
    return digest.hexdigest()


def version_of(tree: dict[str, bytes]) -> str:
    return digest_of(tree)[:16]


def deploy(node: Node) -> dict[str, Any]:
    """Install the checkout's runner on `node`; the runner answers {previous, current}."""
    tree = runner_tree()
    params = {
        "version": version_of(tree),
        "files": {path: base64.b64encode(content).decode() for path, content in tree.items()},
        "digest": digest_of(tree),
    }
    answer: dict[str, Any] = nodes.call(node, "install", params, timeout=INSTALL_SECONDS)
    return answer


def deploy_all() -> dict[str, str]:
    """Install the runner on every enabled remote node; each node's name and what happened."""
    report: dict[str, str] = {}
    for node in Node.objects.filter(enabled=True).exclude(name="local"):
        try:
            answer = deploy(node)
            report[node.name] = f"{answer.get('previous')} -> {answer.get('current')}"
        except (transport.TransportError, transport.RunnerError) as error:
            report[node.name] = f"failed: {error}"
    return report
