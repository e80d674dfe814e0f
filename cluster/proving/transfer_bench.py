"""The worktree transfer's cost per step (`manage.py bench_transfer`, `make bench-cluster`): a
level-1 step on the control plane's own node (the worktree in place) next to the same step on a
test node that shares no filesystem with it (`cluster.proving.testhosts`), whose worktree is
shipped there and whose changes come back (`cluster.shipping`).

For each worktree shape, each repetition makes a new worktree (a git repository of its files),
runs a step on the local node, then `STEPS` steps on the remote one: the first sends the whole
tree (what a full copy would cost every step), the next ones only what changed. Medians are
printed. Needs root (the test node's namespaces).
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from agentos.core import roots
from cluster import dispatch, nodes, sandbox
from cluster.dispatch import StepRef
from cluster.models import Node
from cluster.proving import testhosts

STEPS = 4  # on the remote node, per repetition: the first and the following ones
COMMAND = "echo step >> log.txt && cat log.txt > /dev/null"
NODE = "benchnode"


@dataclass(frozen=True)
class Shape:
    name: str
    files: int
    file_bytes: int


SHAPES = (Shape("small", 50, 2 << 10), Shape("medium", 2000, 16 << 10))


@dataclass
class Figures:
    """One shape's medians: milliseconds and bytes."""

    shape: Shape
    tree_bytes: int
    local_ms: float
    first: dict[str, float]
    following: dict[str, float]


def run(*, repeats: int, say: Callable[[str], None]) -> list[Figures]:
    base = Path(settings.DATA_DIR) / "bench-transfer"
    with _node(base) as node:
        return [_measure(shape, node, repeats, say) for shape in SHAPES]


def report(figures: list[Figures]) -> list[str]:
    lines = [
        "worktree transfer per step, medians (ms; bytes sent and brought back)",
        f"{'shape':<8}{'files':>6}{'tree':>10} | {'local L1':>9} | "
        f"{'remote step':>11}{'sent':>10}{'ship':>7}{'back':>7} | first step / following",
    ]
    for each in figures:
        for label, values in (("first", each.first), ("next", each.following)):
            lines.append(
                f"{each.shape.name if label == 'first' else '':<8}"
                f"{each.shape.files if label == 'first' else '':>6}"
                f"{_size(each.tree_bytes) if label == 'first' else '':>10} | "
                f"{f'{each.local_ms:.0f}' if label == 'first' else '':>9} | "
                f"{values['step_ms']:>11.0f}{_size(values['sent_bytes']):>10}"
                f"{values['ship_ms']:>7.0f}{values['back_ms']:>7.0f} | {label}"
            )
    return lines


def _measure(shape: Shape, node: Node, repeats: int, say: Callable[[str], None]) -> Figures:
    template = _template(shape)
    local_ms: list[float] = []
    first: list[dict[str, float]] = []
    following: list[dict[str, float]] = []
    tree_bytes = 0
    try:
        for repeat in range(repeats):
            worktree = template.with_name(f"{template.name}-{repeat}-{secrets.token_hex(3)}")
            shutil.copytree(template, worktree, symlinks=True)
            sandbox.give(worktree)
            try:
                local_ms.append(_step(worktree, on=nodes.local_node(), off=node)[0])
                series = f"bench-{secrets.token_hex(4)}"
                for number in range(STEPS):
                    ms, answer = _step(worktree, on=node, off=nodes.local_node(), series=series)
                    moved = answer["transfer"]
                    tree_bytes = int(moved["tree_bytes"])
                    figures = {
                        "step_ms": ms,
                        "sent_bytes": float(moved["sent_bytes"]),
                        "ship_ms": moved["sent_seconds"] * 1000,
                        "back_ms": moved["back_seconds"] * 1000,
                    }
                    (first if number == 0 else following).append(figures)
            finally:
                shutil.rmtree(worktree, ignore_errors=True)
            say(f"{shape.name}: repetition {repeat + 1} of {repeats} done")
    finally:
        shutil.rmtree(template, ignore_errors=True)
    return Figures(
        shape, tree_bytes, statistics.median(local_ms), _medians(first), _medians(following)
    )


def _step(
    worktree: Path, *, on: Node, off: Node, series: str | None = None
) -> tuple[float, dict[str, Any]]:
    nodes.set_enabled(node=off, enabled=False)
    nodes.set_enabled(node=on, enabled=True)
    built = sandbox.profile(
        1, ["/bin/sh", "-c", COMMAND], worktree, sandbox.Limits(wall_seconds=60), sandbox._ready()
    )
    series = series or f"bench-{secrets.token_hex(4)}"
    step = StepRef(f"{series}-{secrets.token_hex(3)}", secrets.token_hex(8), 1)
    began = time.monotonic()
    answer = dispatch.execute(built, step=step, needs=dispatch.Needs(1, 256 << 20, 0))
    elapsed = (time.monotonic() - began) * 1000
    if answer["exit_code"] != 0:
        raise RuntimeError(f"the bench step failed on {on.name}: {answer}")
    return elapsed, answer


def _template(shape: Shape) -> Path:
    """A git repository of `shape.files` files of random bytes (incompressible, as the worst
    case), in directories of 50, committed: the tree and its objects both travel."""
    # Where worktrees live: a directory the sandbox uids can traverse.
    folder = roots.workspaces_dir() / "bench-transfer"
    folder.mkdir(mode=0o711, parents=True, exist_ok=True)
    path = folder / f"{shape.name}-{secrets.token_hex(3)}"
    path.mkdir()
    for index in range(shape.files):
        folder = path / "src" / f"d{index // 50}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index}.txt").write_bytes(os.urandom(shape.file_bytes))
    environment = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (
        ["init", "--quiet", "--initial-branch=main"],
        ["add", "--all"],
        ["-c", "user.name=bench", "-c", "user.email=bench@agentos.invalid", "commit", "-qm", "x"],
    ):
        subprocess.run(  # noqa: S603 (our own repository of random files)
            ["/usr/bin/git", *argv], cwd=path, env=environment, check=True, capture_output=True
        )
    return path


@contextmanager
def _node(base: Path) -> Iterator[Node]:
    """One test node, registered and enabled only while measured; the local node back on."""
    hosts = testhosts.start(names=[NODE], base=base, public_key_line=nodes.public_key_line())
    (host,) = hosts.nodes
    local = nodes.local_node()
    try:
        node = nodes.add_node(
            name=NODE, address=host.node_ip, port=host.port, host_key=host.host_key, replace=True
        )
        nodes.hello(node)
        yield node
    finally:
        hosts.stop()
        nodes.close_all()
        Node.objects.filter(name=NODE).update(enabled=False)
        nodes.set_enabled(node=local, enabled=True)
        shutil.rmtree(base, ignore_errors=True)


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def _size(value: float) -> str:
    if value >= 1 << 20:
        return f"{value / (1 << 20):.1f} MiB"
    if value >= 1 << 10:
        return f"{value / (1 << 10):.1f} KiB"
    return f"{value:.0f} B"
