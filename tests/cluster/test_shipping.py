"""Steps on nodes that share no filesystem with the control plane (docs/cluster.md, "Worktrees on
nodes"): each test node has its own filesystem root, so a step passes there only if its worktree
was shipped to it and its changes brought back."""

from __future__ import annotations

import secrets
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from cluster import dispatch, nodes, placement, sandbox
from cluster.dispatch import StepRef
from cluster.models import Node, Placement
from cluster.proving import testhosts
from cluster.runner import treesync
from cluster.sandbox import Limits
from kernel.models import Run
from tests.cluster.conftest import git
from tests.cluster.node_fixtures import NAMES, cluster_nodes, hellos, hosts, key_row
from tests.cluster.test_nodes import hello_answer
from tests.tools.conftest import FINISH, calls, demo_base, hostile, hostile_mission, outputs

__all__ = ["cluster_nodes", "demo_base", "hellos", "hostile", "hostile_mission", "hosts", "key_row"]

# Files made, changed (mode too), linked, removed and committed; the fourth step is where a node
# is killed on the cluster (it leaves `killme` while it sleeps).
TURNS = [
    calls(("shell", {"command": "mkdir -p src/deep/er && echo a > src/deep/er/a.txt"})),
    calls(("shell", {"command": "echo one >> log.txt; printf '#!/bin/sh\\n' > run.sh"})),
    calls(("shell", {"command": "chmod 755 run.sh && ln -s src/deep/er/a.txt link"})),
    calls(("git_commit", {"message": "first"})),
    calls(("shell", {"command": "touch killme; sleep 4; rm killme; echo two >> log.txt"})),
    calls(("shell", {"command": "rm -r src/deep link && printf 'x\\000y' > bin.dat"})),
    calls(("git_commit", {"message": "second"})),
    FINISH,
]


def history(worktree: Path) -> list[str]:
    """The branch's commits as their trees and messages (their dates differ between runs)."""
    log = git("-c", "safe.directory=*", "log", "--format=%T %s", "-n", "3", cwd=worktree)
    return log.splitlines()


def files(worktree: Path) -> treesync.Manifest:
    return {
        rel: entry
        for rel, entry in treesync.manifest(worktree).items()
        if rel != ".git" and not rel.startswith(".git/")
    }


class Killer:
    """Kills the node (its sshd and all below: runner, sandbox) on whose copy `killme` appears,
    as a machine losing power mid-step."""

    def __init__(self, hosts: testhosts.TestHosts) -> None:
        self.hosts = hosts
        self.killed: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        try:
            while not self.done.wait(0.05):
                for host in self.hosts.nodes:
                    if any((host.state / "trees").glob("*/copy/killme")):
                        self.killed.append(host.name)
                        self.hosts.kill(host.name)
                        return
        finally:
            connection.close()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)


@pytest.mark.timeout(300)  # measured 30 s
@pytest.mark.django_db(transaction=True)  # the worker's lease renewer has its own connection
def test_a_mission_on_three_nodes_sharing_no_filesystem_ends_with_the_commits_of_one_node(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node], hostile: Callable[..., Run]
) -> None:
    """The same mission twice: on the control plane's own node alone, then on the three test
    nodes (the local one disabled), one of them killed mid-step. Both end with the same commits
    and the same files; the killed step was placed again and its write landed once."""
    local = nodes.local_node()
    for node in cluster_nodes:
        nodes.set_enabled(node=node, enabled=False)
    alone = hostile(TURNS)
    assert alone.status == "done", (alone.error, outputs(alone))

    nodes.set_enabled(node=local, enabled=False)
    for node in cluster_nodes:
        nodes.set_enabled(node=node, enabled=True)
    killer = Killer(hosts)
    try:
        spread = hostile(TURNS)
    finally:
        killer.stop()
        for name in killer.killed:
            hosts.restart(name)
    assert spread.status == "done", (spread.error, outputs(spread))

    one, many = Path(alone.workspace), Path(spread.workspace)
    assert (many / "log.txt").read_text() == "one\ntwo\n" == (one / "log.txt").read_text()
    assert [line.split(" ", 1)[1] for line in history(many)][:2] == ["second", "first"]
    assert history(many) == history(one)
    assert files(many) == files(one)
    assert files(many)["run.sh"]["m"] == 0o755
    assert files(many)["bin.dat"]["n"] == 3
    assert "link" not in files(many)
    assert "killme" not in files(many)

    attempts: dict[str, list[tuple[str, str]]] = {}
    for attempt in Placement.objects.filter(step_id__startswith=f"run-{spread.pk}-"):
        attempts.setdefault(attempt.step_id, []).append((attempt.node.name, attempt.status))
    assert len(attempts) == 5  # the shell steps; the git tools run on the control plane
    assert {name for tried in attempts.values() for name, _ in tried} == set(NAMES)
    (killed,) = killer.killed
    lost = [tried for tried in attempts.values() if (killed, Placement.Status.LOST) in tried]
    assert len(lost) == 1
    assert sorted(status for _, status in lost[0]) == [Placement.Status.DONE, Placement.Status.LOST]
    for tried in attempts.values():
        assert [status for _, status in tried].count(Placement.Status.DONE) == 1

    # Nothing of the control plane is on the nodes: not its worktrees, not its data dir.
    for name in NAMES:
        assert not hosts.sees(name, many)
        assert not hosts.sees(name, Path(settings.DATA_DIR))
        assert hosts.sees(name, Path(nodes.DEFAULT_NODE_ROOT) / "state")
    assert Path(settings.DATA_DIR).exists()


def test_it_weighs_the_worktree_a_node_lacks_against_its_load(db: None) -> None:
    """Two idle nodes: the steps of a run stay on the one holding its worktree's copy while
    sending the whole tree elsewhere weighs more than the load between them; a small tree or a
    busy holder lets them go round (these nodes are never called: their telemetry is fresh)."""
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    for name, load1 in (("holder", 1.0), ("other", 0.2)):
        node = nodes.add_node(name=name, address="192.0.2.1", host_key=testhosts.host_key_pair()[1])
        nodes.record_hello(
            node=node, answer=hello_answer(name, levels=[1], load1=load1, mem_available=4 << 30)
        )
    series = f"run-{secrets.token_hex(4)}-1"
    placement.finish(
        placement.place(step_id=f"{series}-1", key="k", node=Node.objects.get(name="holder")),
        status=Placement.Status.DONE,
    )
    assert placement.holders(series) == {"holder"}

    def weigh(tree_bytes: int) -> Callable[[Node], int]:
        return lambda node: 0 if node.name in placement.holders(series) else tree_bytes

    needs = placement.Needs(level=1)
    assert placement.choose(needs, transfer=weigh(1 << 20)).name == "other"  # 1 MiB: load wins
    assert placement.choose(needs, transfer=weigh(64 << 20)).name == "holder"
    nodes.record_hello(
        node=Node.objects.get(name="holder"),
        answer=hello_answer("holder", levels=[1], load1=40, mem_available=4 << 30),
    )
    assert placement.choose(needs, transfer=weigh(64 << 20)).name == "other"


def test_a_replay_brings_back_the_changes_the_node_kept_with_its_result(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node], workdir: Path
) -> None:
    """A worker killed after the node answered and before its changes reached the worktree: the
    replay finds the node's result (`recorded`) and applies what it kept (`settle`), the same
    however often."""
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    (workdir / "gone.txt").write_text("x")
    script = "echo once >> log.txt; rm gone.txt; mkdir -p d && echo in > d/f"
    built = sandbox.profile(
        1, ["/bin/sh", "-c", script], workdir, Limits(wall_seconds=30), sandbox._ready()
    )
    ref = StepRef(f"step-{secrets.token_hex(5)}", secrets.token_hex(8), 1)
    answer = dispatch.execute(built, step=ref, needs=dispatch.Needs(1, 256 << 20, 0))
    assert answer["exit_code"] == 0
    assert (workdir / "log.txt").read_text() == "once\n"

    # The worktree as before the step, as if the apply never happened.
    (workdir / "log.txt").unlink()
    shutil.rmtree(workdir / "d")
    (workdir / "gone.txt").write_text("x")
    found = dispatch.recorded(ref)
    assert found is not None
    assert (found["replayed"], found["tree"]["remove"]) == (True, ["gone.txt"])
    for _ in range(2):
        dispatch.settle(ref, found, workdir=workdir)
        assert (workdir / "log.txt").read_text() == "once\n"
        assert (workdir / "d" / "f").read_text() == "in\n"
        assert not (workdir / "gone.txt").exists()
    assert (workdir / "log.txt").stat().st_uid == workdir.stat().st_uid != 0


def test_a_file_larger_than_a_chunk_travels_in_parts_both_ways(
    hosts: testhosts.TestHosts,
    cluster_nodes: list[Node],
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control plane's chunk made 64 KiB: a 300 KiB file goes out in parts and its changed
    copy comes back in parts, each checked whole against its hash."""
    monkeypatch.setattr(treesync, "CHUNK_BYTES", 64 << 10)
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    big = secrets.token_bytes(300 << 10)
    (workdir / "big.bin").write_bytes(big)
    script = "cat big.bin big.bin > twice.bin && echo tail >> big.bin"
    built = sandbox.profile(
        1, ["/bin/sh", "-c", script], workdir, Limits(wall_seconds=30), sandbox._ready()
    )
    ref = StepRef(f"step-{secrets.token_hex(5)}", secrets.token_hex(8), 1)
    answer = dispatch.execute(built, step=ref, needs=dispatch.Needs(1, 256 << 20, 0))
    assert answer["exit_code"] == 0
    assert answer["transfer"]["sent_bytes"] == len(big)
    assert answer["transfer"]["back_bytes"] == 3 * len(big) + len(b"tail\n")
    assert (workdir / "twice.bin").read_bytes() == big + big
    assert (workdir / "big.bin").read_bytes() == big + b"tail\n"
