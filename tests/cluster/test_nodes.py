"""Nodes over real SSH: three test nodes (network namespaces, each with its own sshd and runner)
shared by the whole module; the control plane reaches them with its vault-kept key."""

from __future__ import annotations

import functools
import io
import re
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from agentos.core import vault
from cluster import (
    deploy,
    dispatch,
    egress,
    nodes,
    placement,
    sandbox,
    shipping,
    tasks,
    transport,
)
from cluster.dispatch import StepRef
from cluster.models import LOCAL, ControlKey, Node, Placement
from cluster.proving import testhosts
from cluster.runner import bwrap
from cluster.sandbox import Limits
from kernel.models import Event, Run
from missions import environments as project_environments
from missions.models import Mission
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.node_fixtures import NAMES, cluster_nodes, hellos, hosts, key_row, on_nodes
from tests.cluster.test_egress import make_run
from tests.polling import wait_for
from tests.tools.conftest import FINISH, calls, demo_base, hostile, hostile_mission, outputs

# The tools' fixtures of a mission on the demo repository, for the mission test below, and the
# test nodes'.
__all__ = ["cluster_nodes", "demo_base", "hellos", "hostile", "hostile_mission", "hosts", "key_row"]

WHO = project_environments.Who(by="owner", username="owner", address=None)


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


def profile(script: str, workdir: Path, wall_seconds: float = 30) -> dict[str, Any]:
    return sandbox.profile(
        1, ["/bin/sh", "-c", script], workdir, Limits(wall_seconds=wall_seconds), sandbox._ready()
    )


def step_ref(epoch: int = 1) -> StepRef:
    return StepRef(f"step-{secrets.token_hex(5)}", secrets.token_hex(8), epoch)


def shipped(node: Node, built: dict[str, Any]) -> dict[str, Any]:
    """The `tree` parameter of a call naming `built`'s workdir, its worktree sent to `node`."""
    sent = shipping.ship(functools.partial(nodes.call, node, timeout=60), built)
    assert sent is not None
    return sent.tree


def test_it_collects_each_nodes_telemetry_over_ssh(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node]
) -> None:
    for node in cluster_nodes:
        up = nodes.hello(node)
        assert up.status == Node.Status.UP
        assert up.telemetry["node"] == node.name
        assert 1 in up.levels
        assert up.runner_version == hosts.node(node.name).version
        assert up.telemetry_values["cpus"] >= 1
        assert up.telemetry_at is not None


def test_it_finishes_a_step_once_on_another_node_when_its_node_dies_mid_step(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node], workdir: Path
) -> None:
    """The step appends to `starts` when it starts and to `completions` when it completes; its
    node (sshd, runner and sandbox) is SIGKILLed while it sleeps in between. An attempt killed
    before its end never completes, so `completions` counts completed attempts: one, on another
    node, under a higher fence and the same key; `starts` shows the killed attempt did start.
    Then the stale fence is refused over SSH, by the node that ran it and the one back from
    the dead."""
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    ref = step_ref()
    # Only the first attempt waits (to be killed); the second completes at once.
    # Each attempt starts from the control plane's worktree (the lost one wrote only its node's
    # copy), so the second one sleeps too, long enough for the first to be killed meanwhile.
    script = "echo start >> starts; sleep 4; echo done >> completions"
    killed: list[str] = []

    def kill_when_started() -> None:
        wait_for(lambda: on_nodes(hosts, workdir, "starts"), timeout=30, message="a start")
        (running,) = [
            h for h in hosts.nodes if (h.state / "active" / f"{ref.step_id}.json").exists()
        ]
        killed.append(running.name)
        hosts.kill(running.name)

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    try:
        answer = dispatch.execute(
            profile(script, workdir), step=ref, needs=dispatch.Needs(1, 256 << 20, 0)
        )
    finally:
        killer.join()
    try:
        first, second = placement.attempts(ref.step_id)
        assert (first.node.name, first.status) == (killed[0], Placement.Status.LOST)
        assert (second.status, second.key, second.fence) == (
            Placement.Status.DONE,
            first.key,
            first.fence + 1,
        )
        assert answer["node"] == second.node.name != killed[0]
        assert answer["exit_code"] == 0
        # The killed attempt started on its node's copy; nothing of it reached the worktree.
        copies = {
            path.parents[4].name: path.read_text() for path in on_nodes(hosts, workdir, "starts")
        }
        assert copies == {killed[0]: "start\n", second.node.name: "start\n"}
        assert (workdir / "starts").read_text() == "start\n"
        assert (workdir / "completions").read_text() == "done\n"
        lost = Node.objects.get(name=killed[0])
        assert lost.status == Node.Status.LOST
        assert "closed before the runner answered" in lost.lost_reason

        # A replay of the step asks for its stored result where it was last placed.
        answered = {key: value for key, value in answer.items() if key != "transfer"}
        assert dispatch.recorded(ref) == {**answered, "replayed": True}

        # The dead node comes back: it is told the step's newer fence, so a late request of the
        # lost attempt is refused there as on the node that ran the step.
        hosts.restart(killed[0])
        back = nodes.hello(lost)
        assert back.status == Node.Status.UP
        stale = {
            "step_id": ref.step_id,
            "key": ref.key,
            "fence": first.fence,
            "profile": profile(script, workdir),
        }
        for node in (back, second.node):
            with pytest.raises(transport.StaleFence) as refused:
                nodes.call(node, "run", stale, timeout=30)
            assert refused.value.code == -32010
            assert refused.value.message == (
                f"stale fence {first.fence} for step {ref.step_id}: "
                f"fence {second.fence} already accepted"
            )
        assert (workdir / "completions").read_text() == "done\n"
    finally:
        hosts.restart(killed[0])


def test_it_swaps_the_runner_on_every_node_while_a_step_runs(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node], workdir: Path
) -> None:
    """A new runner is installed on all three nodes while a step runs on one: the step ends
    under the version it started with, the next ones run the new version, and the environment
    built before the swap is kept as it was."""
    n1 = cluster_nodes[0]
    old = hosts.node("n1").version
    setup = profile(
        "mkdir /env/bin && printf '#!/bin/sh\\necho from-env\\n' > /env/bin/hi"
        " && chmod 755 /env/bin/hi",
        workdir,
    )
    built = nodes.call(
        n1,
        "build_environment",
        {"name": "tools", "version": "1", "profile": setup, "tree": shipped(n1, setup)},
        timeout=90,
    )
    endpoint = nodes.endpoint(n1)  # the thread below uses no database
    waits = profile("touch started; while [ ! -e go ]; do sleep 0.05; done; echo ended", workdir)
    running = {
        "step_id": f"step-{secrets.token_hex(5)}",
        "key": secrets.token_hex(8),
        "fence": 1,
        "profile": waits,
        "tree": shipped(n1, waits),
    }
    answers: list[dict[str, Any]] = []
    thread = threading.Thread(
        target=lambda: answers.append(endpoint.call("run", running, timeout=90))
    )
    thread.start()
    try:
        wait_for(lambda: on_nodes(hosts, workdir, "started"), timeout=30, message="a start")
        # A tree of its own, so that the version is new whatever the checkout holds.
        tree = {
            **deploy.runner_tree(),
            "cluster/runner/release.py": f'NAME = "{secrets.token_hex(4)}"\n'.encode(),
        }
        swapped = deploy.deploy_all(tree=tree)
    finally:
        for started in on_nodes(hosts, workdir, "started"):
            started.with_name("go").touch()
        thread.join(60)

    new = deploy.version_of(tree)
    assert swapped == dict.fromkeys(NAMES, f"{old} -> {new}")
    assert answers[0]["output"] == "ended\n"
    assert answers[0]["runner_version"] == old
    for host in hosts.nodes:
        assert (host.root / "runner" / "current").readlink().name == new
    assert nodes.call(n1, "environments", {}, timeout=30) == [built]
    with_env = {**profile("/env/bin/hi", workdir), "environment": {"name": "tools", "version": "1"}}
    after = nodes.call(
        n1,
        "run",
        {
            "step_id": f"step-{secrets.token_hex(5)}",
            "key": secrets.token_hex(8),
            "fence": 1,
            "profile": with_env,
            "tree": shipped(n1, with_env),
        },
        timeout=60,
    )
    assert (after["output"], after["environment"], after["runner_version"]) == (
        "from-env\n",
        "tools@1",
        new,
    )


def test_it_refreshes_every_node_and_marks_an_unreachable_one_lost(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node]
) -> None:
    hosts.kill("n3")
    try:
        tasks.refresh_nodes.call_local()
    finally:
        hosts.restart("n3")
    found = {node.name: node for node in Node.objects.filter(name__in=NAMES)}
    assert found["n1"].status == found["n2"].status == Node.Status.UP
    assert found["n3"].status == Node.Status.LOST
    assert "cannot connect" in found["n3"].lost_reason
    with pytest.raises(placement.NoNode, match=r"n3: lost since .*cannot connect"):
        placement.choose(placement.Needs(level=1), exclude=["n1", "n2", LOCAL])


def test_it_registers_a_node_and_prints_its_authorized_keys_line(db: None, tmp_path: Path) -> None:
    key_file = tmp_path / "host.pub"
    key_file.write_text(testhosts.host_key_pair()[1] + " root@edge\n")
    out = io.StringIO()
    call_command(
        "node_add",
        "edge",
        "192.0.2.7",
        "--port",
        "2222",
        "--host-key",
        str(key_file),
        "--from",
        "192.0.2.1",
        stdout=out,
    )
    node = Node.objects.get(name="edge")
    assert (node.address, node.port, node.host_key) == (
        "192.0.2.7",
        2222,
        key_file.read_text().rsplit(" ", 1)[0],
    )
    line = out.getvalue().splitlines()[-1]
    with pytest.raises(CommandError, match="a node named 'edge' already exists"):
        call_command("node_add", "edge", "192.0.2.8", stdout=out)
    # Pinned again (the machine got a new host key): same node, new key.
    new_key = testhosts.host_key_pair()[1]
    key_file.write_text(new_key + "\n")
    call_command(
        "node_add", "edge", "192.0.2.8", "--host-key", str(key_file), "--replace", stdout=out
    )
    replaced = Node.objects.get(name="edge")
    assert (replaced.pk, replaced.address, replaced.host_key) == (node.pk, "192.0.2.8", new_key)
    listed = io.StringIO()
    call_command("node_list", stdout=listed)
    rows = [line.split()[:3] for line in listed.getvalue().splitlines()[1:]]
    assert rows == [["edge", "192.0.2.8:22", "unknown"], ["local", "(this", "machine)"]]
    assert line.startswith(
        'command="cd /var/lib/agentos-node/runner/current && exec python3 -m cluster.runner'
        ' --state /var/lib/agentos-node/state --node edge",restrict,from="192.0.2.1" ssh-ed25519 '
    )
    assert line.endswith(" agentos-control-plane")
    assert nodes.control_key().get_base64() in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Edge_1", "192.0.2.7"], "node name 'Edge_1': use lowercase letters"),
        (["local", "192.0.2.7"], "'local' is the control plane's own node"),
        (["edge", "192.0.2.7", "--port", "0"], "node port 0: between 1 and 65535"),
        (["edge", "192.0.2.7", "--from", "nowhere"], "from address 'nowhere'"),
        (["edge", "192.0.2.7", "--host-key", "/nonexistent"], "--host-key /nonexistent"),
    ],
)
def test_it_refuses_a_bad_node_precisely(db: None, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("node_add", *args, stdout=io.StringIO())
    assert not Node.objects.filter(name="edge").exists()


def test_it_pins_a_host_key_from_an_ssh_keyscan_line(db: None) -> None:
    public = testhosts.host_key_pair()[1]
    node = nodes.add_node(name="edge", address="192.0.2.7", host_key=f"192.0.2.7 {public}\n")
    assert node.host_key == public


def test_it_refuses_a_malformed_host_key(db: None) -> None:
    with pytest.raises(nodes.NodeError, match="host key: the host key says type 'ssh-rsa'"):
        nodes.add_node(
            name="edge",
            address="192.0.2.7",
            host_key="ssh-rsa " + testhosts.host_key_pair()[1].split()[1],
        )


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_missions_shell_steps_on_the_three_nodes(
    hosts: testhosts.TestHosts,
    cluster_nodes: list[Node],
    hostile: Callable[..., Run],
) -> None:
    """A mission through the kernel (its model scripted): each shell step is placed on a node,
    the three nodes take turns, and each node's runner holds the result of the steps it ran."""
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    commands = [f"echo step{index} >> steps.txt" for index in range(3)]
    run = hostile([calls(("shell", {"command": command})) for command in commands] + [FINISH])

    assert run.status == "done", run.error
    assert [out["output"].splitlines()[-1] for out in outputs(run, "shell")] == [
        "[exit code 0]"
    ] * 3
    assert (Path(run.workspace) / "steps.txt").read_text() == "step0\nstep1\nstep2\n"
    attempts = list(Placement.objects.filter(step_id__startswith=f"run-{run.pk}-"))
    assert sorted(attempt.node.name for attempt in attempts) == NAMES
    for attempt in attempts:
        assert attempt.status == Placement.Status.DONE
        # The claim's fence of the run, then the first placement under it.
        epoch, number = divmod(attempt.fence, 1 << 20)
        assert (number, 1 <= epoch <= run.fence) == (1, True)
        current = hosts.node(attempt.node.name).root / "runner" / "current"
        assert attempt.runner_version == current.readlink().name
        stored = nodes.call(attempt.node, "result", {"key": attempt.key}, timeout=30)
        assert stored["node"] == attempt.node.name


@pytest.mark.timeout(300)  # measured 5 s; it waits up to 120 s for the second step
@pytest.mark.django_db(transaction=True)
def test_a_runner_swapped_while_a_mission_runs_keeps_the_projects_environment(
    hosts: testhosts.TestHosts,
    cluster_nodes: list[Node],
    hostile: Callable[..., Run],
    hostile_mission: tuple[Mission, Path],
) -> None:
    """A mission of six shell steps over the three nodes, its project with an environment: a new
    runner is installed on every node while its second step runs. The mission ends done; the
    step that was running ends under the old runner, the steps after it run the new one; each
    node built the environment once and its steps, before and after the swap, used that build."""
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    mission, _ = hostile_mission
    project = project_environments.configure(
        mission.project, setup="mkdir -p /env/bin && date +%s%N > /env/built", who=WHO
    )
    label = project_environments.of_project(project)
    assert label is not None
    # What the nodes run now: an earlier test of the module may have swapped it already.
    old = (hosts.node("n1").root / "runner" / "current").readlink().name
    tree = {  # a tree of its own, so that the version is new whatever the checkout holds
        **deploy.runner_tree(),
        "cluster/runner/release.py": f'NAME = "{secrets.token_hex(4)}"\n'.encode(),
    }
    swapped: dict[str, str] = {}

    def swap_during_the_second_step() -> None:
        try:

            def swap_once_started() -> bool:
                run = Run.objects.filter(account=mission).exclude(workspace="").first()
                started = on_nodes(hosts, Path(run.workspace), "started") if run else []
                if started:
                    swapped.update(deploy.deploy_all(tree=tree))
                    started[0].with_name("go").touch()
                return bool(swapped)

            wait_for(
                swap_once_started,
                timeout=120,
                message="the second step to start",
                interval=0.05,
            )
        finally:
            connection.close()

    swapper = threading.Thread(target=swap_during_the_second_step)
    swapper.start()
    report = "cat /env/built"
    waits = "touch started; while [ ! -e go ]; do sleep 0.05; done; "
    try:
        run = hostile(
            [calls(("shell", {"command": report}))]
            + [calls(("shell", {"command": waits + report}))]
            + [calls(("shell", {"command": report})) for _ in range(4)]
            + [FINISH]
        )
    finally:
        swapper.join(120)

    new = deploy.version_of(tree)
    assert run.status == "done", run.error
    assert swapped == dict.fromkeys(NAMES, f"{old} -> {new}")
    attempts = list(Placement.objects.filter(step_id__startswith=f"run-{run.pk}-").order_by("pk"))
    assert [attempt.runner_version for attempt in attempts] == [old] * 2 + [new] * 4
    assert {attempt.environment for attempt in attempts} == {label.label}
    builds: dict[str, set[str]] = {}
    for attempt, out in zip(attempts, outputs(run, "shell"), strict=True):
        builds.setdefault(attempt.node.name, set()).add(out["output"].splitlines()[0])
    # Every node ran steps before and after the swap, each of them on that node's one build.
    assert sorted(builds) == NAMES
    assert all(len(stamps) == 1 for stamps in builds.values()), builds


@pytest.mark.django_db(transaction=True)
def test_a_sandbox_on_another_node_reaches_out_through_its_runs_proxy_relayed_over_ssh(
    hosts: testhosts.TestHosts,
    cluster_nodes: list[Node],
    service: egress.Service,
    upstream: Upstream,
    elsewhere: Upstream,
    sandbox_base: Path,
) -> None:
    """The run's egress socket is on the control plane; the node's sandbox gets a socket of its
    node's relay instead, carried over SSH to the run's proxy: the allowed host answers, another
    is refused and journaled, and the relay's socket is gone from the node once the step ended."""
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    workdir = Path(tempfile.mkdtemp(prefix="relay-", dir=sandbox_base))
    sandbox.give(workdir, run.pk)
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=120)
    curl = 'curl -s --max-time 10 --proxy "$http_proxy" --noproxy ""'
    script = (
        f"stat -L -c 'inode %i' {bwrap.EGRESS_SOCKET}; "
        f"{curl} -w '\\nallowed %{{http_code}}\\n' http://127.0.0.1:{upstream.port}/relayed; "
        f"{curl} -o /dev/null -w 'denied %{{http_code}}\\n' http://127.0.0.1:{elsewhere.port}/x"
    )
    ref = step_ref()

    result = sandbox.for_level(1).run(
        ["/bin/sh", "-c", script],
        workdir=workdir,
        limits=Limits(wall_seconds=60),
        run_id=run.pk,
        egress=attached,
        step=ref,
    )

    (attempt,) = placement.attempts(ref.step_id)
    assert attempt.node.name in NAMES
    assert "hello from /relayed" in result.output, result.output
    assert "allowed 200" in result.output, result.output
    assert "denied 403" in result.output, result.output
    # What the sandbox was given is not the control plane's socket but the relay's.
    assert "inode " in result.output
    assert f"inode {attached.socket.stat().st_ino}\n" not in result.output
    assert not [path for host in hosts.nodes for path in (host.state / "relay").glob("*")]
    refused = [e.data for e in Event.objects.filter(run_id=run.pk, kind="egress.refused")]
    assert any(e.get("port") == elsewhere.port for e in refused), refused


def hello_answer(
    name: str, *, levels: list[int], load1: float, mem_available: int
) -> dict[str, Any]:
    return {
        "protocol": 1,
        "runner_version": "v1",
        "node": name,
        "levels": [{"level": level, "available": True, "why": ""} for level in levels],
        "telemetry": {
            "collected_at": time.time(),
            "load1": load1,
            "cpus": 2,
            "mem_total": 8 << 30,
            "mem_available": mem_available,
            "disk_free": 50 << 30,
        },
        "sandboxes": 0,
    }


def test_it_places_by_level_needs_and_load_and_takes_turns(db: None) -> None:
    """Placement's choice from the nodes' telemetry (these nodes are never called: their
    telemetry is fresh)."""
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    shape = {
        "idle-a": ([1], 0.2, 6 << 30),
        "idle-b": ([1, 2], 0.4, 1 << 30),
        "busy": ([1], 7.5, 6 << 30),
    }
    for name, (levels, load1, memory) in shape.items():
        node = nodes.add_node(name=name, address="192.0.2.1", host_key=testhosts.host_key_pair()[1])
        nodes.record_hello(
            node=node, answer=hello_answer(name, levels=levels, load1=load1, mem_available=memory)
        )

    # Only the protocol's fields are kept, each of its type.
    busy = Node.objects.get(name="busy")
    hostile = {
        **hello_answer("busy", levels=[1], load1=7.5, mem_available=6 << 30),
        "junk": "x" * 10_000,
        "runner_version": "v" * 1000,
    }
    hostile["telemetry"] = {**hostile["telemetry"], "cpus": "many", "extra": 1}
    kept = nodes.record_hello(node=busy, answer=hostile).telemetry
    assert "junk" not in kept
    assert kept["runner_version"] == "v" * 64
    assert kept["telemetry"]["cpus"] is None
    assert "extra" not in kept["telemetry"]

    def place_one(needs: placement.Needs) -> str:
        chosen = placement.choose(needs)
        placement.finish(
            placement.place(step_id=f"s-{secrets.token_hex(4)}", key="k", node=chosen),
            status=Placement.Status.DONE,
        )
        return chosen.name

    assert [place_one(placement.Needs(level=1)) for _ in range(4)] == [
        "idle-a",
        "idle-b",
        "idle-a",
        "idle-b",
    ]
    assert place_one(placement.Needs(level=2)) == "idle-b"
    assert place_one(placement.Needs(level=1, memory_bytes=2 << 30)) == "idle-a"
    with pytest.raises(placement.NoNode) as none:
        placement.choose(placement.Needs(level=2, memory_bytes=2 << 30))
    assert str(none.value) == (
        "no node can run a level-2 step now (busy: offers level 1, not 2; idle-a: offers level"
        f" 1, not 2; idle-b: {1 << 30} bytes of memory available, the step needs {2 << 30})"
    )


def test_it_orders_fences_by_the_kernels_fence_first_and_abandons_older_attempts(
    db: None,
) -> None:
    local = nodes.local_node()

    def place(epoch: int) -> Placement:
        return placement.place(step_id="s-1", key="k", node=local, epoch=epoch)

    first, second = place(1), place(1)
    taken_over = place(2)
    stale_worker = place(1)  # a worker that lost the run's lease places the step once more

    assert [first.fence, second.fence, taken_over.fence, stale_worker.fence] == [
        (1 << 20) + 1,
        (1 << 20) + 2,
        (2 << 20) + 1,
        (1 << 20) + 3,
    ]
    assert stale_worker.fence < taken_over.fence  # so runners that saw the newer refuse it
    statuses = dict(Placement.objects.filter(step_id="s-1").values_list("fence", "status"))
    assert statuses == {
        (1 << 20) + 1: Placement.Status.ABANDONED,
        (1 << 20) + 2: Placement.Status.ABANDONED,
        (2 << 20) + 1: Placement.Status.RUNNING,
        (1 << 20) + 3: Placement.Status.RUNNING,
    }


def test_it_keeps_the_control_planes_key_encrypted_and_rotatable(
    db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A vault of its own (rotating adds keys), and a key made under it (in this transaction).
    monkeypatch.delenv(vault.ENV, raising=False)
    monkeypatch.setattr(settings, "DATA_DIR", tmp_path)
    ControlKey.objects.all().delete()
    key = nodes.control_key()
    row = ControlKey.objects.get(pk=1)
    assert key.get_base64() in row.public_line
    assert b"OPENSSH PRIVATE KEY" not in bytes(row.ciphertext)
    assert vault.VAULT_FIELDS.get("cluster.ControlKey") == "ciphertext"

    vault.rotate()
    assert vault.reencrypt().rewritten >= 1
    assert bytes(ControlKey.objects.get(pk=1).ciphertext) != bytes(row.ciphertext)
    assert nodes.control_key().asbytes() == key.asbytes()


def test_it_sends_a_stop_to_the_node_running_the_step(
    hosts: testhosts.TestHosts, cluster_nodes: list[Node], workdir: Path
) -> None:
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    stopping = threading.Event()

    def stop_when_started() -> None:
        wait_for(lambda: on_nodes(hosts, workdir, "started"), timeout=30, message="a start")
        stopping.set()

    stopper = threading.Thread(target=stop_when_started)
    stopper.start()
    ref = step_ref()
    try:
        answer = dispatch.execute(
            profile("touch started; sleep 60", workdir, wall_seconds=90),
            step=ref,
            needs=dispatch.Needs(1, 256 << 20, 0),
            stopping=stopping,
        )
    finally:
        stopper.join()
    assert answer["killed"] == "cancelled"
    assert answer["seconds"] < 30
    (attempt,) = placement.attempts(ref.step_id)
    assert (attempt.status, attempt.node.name) == (Placement.Status.DONE, answer["node"])
