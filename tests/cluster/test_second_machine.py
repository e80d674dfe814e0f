"""docs/cluster.md "Adding a second machine", step by step, against a test node started bare: its
own network and mount namespaces (no filesystem shared with the control plane), its sshd
trusting no key, no runner."""

from __future__ import annotations

import io
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from cluster import dispatch, nodes, sandbox
from cluster.dispatch import StepRef
from cluster.models import Node
from cluster.proving import testhosts
from cluster.sandbox import Limits

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bare(db: None) -> Iterator[testhosts.TestNode]:
    line = nodes.public_key_line()
    base = Path(settings.DATA_DIR) / "testnodes" / "second-machine"
    hosts = testhosts.start(names=["edge1"], base=base, public_key_line=line, bare=True)
    try:
        yield hosts.nodes[0]
    finally:
        nodes.close_all()
        hosts.stop()


def on_node(host: testhosts.TestNode, command: str) -> None:
    """A command "on the machine": here its root is a directory of this one, so the test runs
    the documented command with the node's root in place of /var/lib/agentos-node."""
    subprocess.run(
        ["/bin/sh", "-c", command.replace("/var/lib/agentos-node", str(host.root))],
        check=True,
        cwd=CHECKOUT,
    )


def test_it_adds_a_second_machine_as_the_docs_say_and_runs_a_step_there(
    bare: testhosts.TestNode, tmp_path: Path, workdir: Path
) -> None:
    nodes.set_enabled(node=nodes.local_node(), enabled=False)
    # Before: the machine's sshd trusts no key; the node cannot be reached.
    assert not Node.objects.filter(name="edge1").exists()

    # 2. The runner copied from this checkout.
    on_node(
        bare,
        "mkdir -p -m 711 /var/lib/agentos-node/runner/versions/first /var/lib/agentos-node/state"
        " && tar -C . -cf - cluster/__init__.py cluster/runner"
        " | tar -C /var/lib/agentos-node/runner/versions/first -xf -"
        " && ln -sfn versions/first /var/lib/agentos-node/runner/current",
    )
    # 3. Its host key, checked on the machine, registered with node_add.
    key_file = tmp_path / "edge1_host_ed25519_key.pub"
    key_file.write_text(bare.host_key + " root@edge1\n")
    printed = io.StringIO()
    call_command(
        "node_add",
        "edge1",
        bare.node_ip,
        "--host-key",
        str(key_file),
        "--from",
        bare.host_ip,
        stdout=printed,
    )
    (line,) = [text for text in printed.getvalue().splitlines() if text.startswith("command=")]
    # 4. The printed line appended to root's authorized_keys there.
    with (bare.ssh_dir / "authorized_keys").open("a") as keys:
        keys.write(line + "\n")

    # 5. node_list --refresh shows it up; a step placed there runs on its own copy.
    listed = io.StringIO()
    call_command("node_list", "--refresh", stdout=listed)
    (row,) = [text for text in listed.getvalue().splitlines() if text.startswith("edge1")]
    assert " up " in f" {row} ", listed.getvalue()
    (workdir / "in.txt").write_text("from the control plane\n")
    built = sandbox.profile(
        1,
        ["/bin/sh", "-c", "cat in.txt > out.txt && echo made on $(hostname) >> out.txt"],
        workdir,
        Limits(wall_seconds=30),
        sandbox._ready(),
    )
    step = StepRef(f"step-{secrets.token_hex(5)}", secrets.token_hex(8), 1)
    answer = dispatch.execute(built, step=step, needs=dispatch.Needs(1, 256 << 20, 0))
    assert (answer["node"], answer["exit_code"]) == ("edge1", 0)
    assert (workdir / "out.txt").read_text().startswith("from the control plane\nmade on ")
    assert answer["transfer"]["sent_bytes"] == len("from the control plane\n")
