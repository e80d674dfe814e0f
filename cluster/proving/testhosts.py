"""Real SSH nodes on this machine, for the tests and `make nodes`: each one a network namespace
joined to the host by a veth pair on a private /30, running its own OpenSSH `sshd` (own config,
own host key, root logins by forced command only) whose one authorized key starts the runner
deployed under the node's root.

Each node also has a mount namespace of its own whose root is a fresh tmpfs holding only what a
bare machine has: this machine's `/usr`, `/etc` and library directories read-only, `/dev`, a
`/proc`, `/sys`, an empty `/tmp`, and its own root at `/var/lib/agentos-node` (runner, state,
sshd files). The control plane's data dir and worktrees are not there (`TestHosts.sees` checks a
path from inside): a step passes only if its worktree was shipped to the node
(`cluster.shipping`). The runner runs on the system's `/usr/bin/python3`.

Needs root, `ip` (iproute2), `/usr/sbin/sshd` (openssh-server) and util-linux's `unshare`,
`pivot_root` and `nsenter`. Everything is torn down by
`stop()` (sshd killed, namespaces and veths deleted), and namespaces left by a dead process of an
earlier run are deleted by the next `start()`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cluster import deploy, nodes
from cluster.runner import deploy as runner_deploy

SSHD = "/usr/sbin/sshd"
# Where a node's own root is inside its mount namespace: a real node's default.
NODE_ROOT = Path(nodes.DEFAULT_NODE_ROOT)
NODE_PYTHON = "/usr/bin/python3"
PREFIX = "agn"
# 10.213.0.0/16 holds 16384 /30 networks; each set of nodes takes consecutive ones from an
# offset derived from its pid, skipping networks already on an interface.
POOL = ipaddress.IPv4Network("10.213.0.0/16")
READY_SECONDS = 15.0


class TestHostsError(Exception):
    """The test nodes could not be set up (not root, a missing program, a failing command)."""


@dataclass
class TestNode:
    name: str
    netns: str
    host_veth: str
    node_veth: str
    host_ip: str  # the control plane's address as the node sees it (from= in authorized_keys)
    node_ip: str  # where its sshd listens
    root: Path  # runner/ and state/ of this node
    host_key: str = ""  # its sshd's public host key line, to pin
    version: str = ""  # the runner version first installed
    sshd: subprocess.Popen[bytes] | None = None
    port: int = 22

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def state(self) -> Path:
        return self.root / "state"


@dataclass
class TestHosts:
    nodes: list[TestNode] = field(default_factory=list)

    def node(self, name: str) -> TestNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def kill(self, name: str) -> None:
        """SIGKILL the node's sshd and every process under it (sessions, runners, sandboxes):
        the node dies as a machine losing power would, mid-step."""
        node = self.node(name)
        if node.sshd is not None:
            _kill_tree(node.sshd.pid)
            node.sshd.wait()
            node.sshd = None

    def sees(self, name: str, path: Path) -> bool:
        """Whether `path` exists in node `name`'s own filesystem (its mount namespace)."""
        node = self.node(name)
        if node.sshd is None:
            raise TestHostsError(f"test node {name} is not running")
        done = subprocess.run(  # noqa: S603 (fixed programs, our own arguments)
            [  # noqa: S607 (nsenter from PATH, as `ip`)
                "nsenter",
                f"--target={node.sshd.pid}",
                "--mount",
                "--",
                "/usr/bin/test",
                "-e",
                str(path),
            ],
            capture_output=True,
            check=False,
        )
        if done.returncode not in (0, 1):
            raise TestHostsError(f"nsenter into {name}: {done.stderr.decode(errors='replace')}")
        return done.returncode == 0

    def restart(self, name: str) -> None:
        node = self.node(name)
        if node.sshd is None:
            _start_sshd(node)

    def stop(self) -> None:
        errors: list[str] = []
        for node in self.nodes:
            try:
                self.kill(node.name)
            except OSError as error:  # already gone
                errors.append(f"{node.name}: {error}")
            _run(["ip", "netns", "del", node.netns], check=False)
            _run(["ip", "link", "del", node.host_veth], check=False)


def start(
    *,
    names: list[str],
    base: Path,
    public_key_line: str,
    python: str | None = None,
    bare: bool = False,
) -> TestHosts:
    """Start one SSH node per name, rooted at `base/<name>`, trusting `public_key_line`. A
    `bare` node has no runner and trusts no key: set up as docs/cluster.md "Adding a second
    machine" says (its root is `TestNode.root` on this machine)."""
    if os.geteuid() != 0:
        raise TestHostsError("the SSH test nodes need root (network namespaces, sshd)")
    if not Path(SSHD).exists() or not _ip_present():
        raise TestHostsError(
            "the SSH test nodes need openssh-server and iproute2 (scripts/system-deps --tests)"
        )
    _reap_leftovers()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    python = python or NODE_PYTHON
    hosts = TestHosts()
    try:
        networks = _free_networks(len(names))
        for index, (name, network) in enumerate(zip(names, networks, strict=True)):
            host_ip, node_ip = (str(address) for address in network.hosts())
            tag = f"{PREFIX}{os.getpid()}"
            node = TestNode(
                name=name,
                netns=f"{tag}-{index}",
                host_veth=f"{tag}h{index}",
                node_veth=f"{tag}n{index}",
                host_ip=host_ip,
                node_ip=node_ip,
                root=base / name,
            )
            hosts.nodes.append(node)
            _network(node, network.prefixlen)
            _deploy(node, python=python, public_key_line=public_key_line, bare=bare)
            _start_sshd(node)
    except BaseException:
        hosts.stop()
        raise
    return hosts


def _network(node: TestNode, prefix: int) -> None:
    _run(["ip", "netns", "add", node.netns])
    _run(["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", node.node_veth])
    _run(["ip", "link", "set", node.node_veth, "netns", node.netns])
    _run(["ip", "addr", "add", f"{node.host_ip}/{prefix}", "dev", node.host_veth])
    _run(["ip", "link", "set", node.host_veth, "up"])
    ns = ["ip", "-n", node.netns]
    _run([*ns, "addr", "add", f"{node.node_ip}/{prefix}", "dev", node.node_veth])
    _run([*ns, "link", "set", node.node_veth, "up"])
    _run([*ns, "link", "set", "lo", "up"])
    # Answers to any host address go back through the veth (a connection from another of this
    # machine's addresses then reaches sshd, which refuses it by the key's from=).
    _run([*ns, "route", "add", "default", "via", node.host_ip])


def _deploy(node: TestNode, *, python: str, public_key_line: str, bare: bool = False) -> None:
    # The runner's first install is a copy of the tree; later ones go through its `install`.
    if node.root.exists():
        shutil.rmtree(node.root)
    node.ssh_dir.mkdir(parents=True, mode=0o700)
    if not bare:
        node.state.mkdir(mode=0o711)  # the runner keeps it so: environments are under it
        node.version = _first_install(node.root / "runner")
    private, public = host_key_pair()
    key_file = node.ssh_dir / "ssh_host_ed25519_key"
    key_file.write_bytes(private.encode())
    key_file.chmod(0o600)
    node.host_key = public
    authorized = node.ssh_dir / "authorized_keys"
    line = nodes.authorized_keys_line(
        name=node.name,
        from_address=node.host_ip,
        root=str(NODE_ROOT),
        python=python,
        public_line=public_key_line,
    )
    authorized.write_text("" if bare else line + "\n")
    authorized.chmod(0o600)
    inside = NODE_ROOT / "ssh"  # the sshd's own view of its files
    (node.ssh_dir / "sshd_config").write_text(
        "\n".join(
            [
                f"ListenAddress {node.node_ip}",
                f"Port {node.port}",
                f"HostKey {inside / key_file.name}",
                f"PidFile {inside / 'sshd.pid'}",
                f"AuthorizedKeysFile {inside / authorized.name}",
                "PermitRootLogin forced-commands-only",
                # The node's files are ours (0600 key list, 0700 directory) but may sit below a
                # directory anyone may write (a checkout under /tmp), which strict modes refuse.
                "StrictModes no",
                "AllowUsers root",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "PermitUserEnvironment no",
                "UseDNS no",
                "LogLevel VERBOSE",
                "MaxStartups 100",
                "MaxSessions 100",
                "",
            ]
        )
    )


def _first_install(runner: Path) -> str:
    """Copy the runner's tree as its first version (later ones go through its `install`)."""
    tree = deploy.runner_tree()
    version = deploy.version_of(tree)
    target = runner / "versions" / version
    for relative, content in tree.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (target / runner_deploy.DIGEST_FILE).write_text(deploy.digest_of(tree) + "\n")
    (runner / "current").symlink_to(Path("versions") / version)
    return version


def host_key_pair() -> tuple[str, str]:
    """A new Ed25519 SSH key: the private key (OpenSSH format) and its public line."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return pem.decode(), public.decode()


# Run in the node's network namespace by `unshare --mount`: builds the node's own root on a
# tmpfs (see the module docstring), pivots into it and becomes its sshd. $1 is the new root's
# mount point, $2 the node's own directory on this machine.
ROOT_SCRIPT = f"""\
set -e
mount -t tmpfs -o mode=0755 agentos-node "$1"
cd "$1"
for name in usr etc; do
  mkdir "$name" && mount --rbind "/$name" "$name" && mount -o remount,bind,ro "$name"
done
for name in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$name" ]; then ln -s "$(readlink "/$name")" "$name"
  elif [ -d "/$name" ]; then
    mkdir "$name" && mount --rbind "/$name" "$name" && mount -o remount,bind,ro "$name"
  fi
done
mkdir -p dev proc sys tmp run/sshd root var/tmp .{NODE_ROOT}
mount --rbind /dev dev
mount -t proc proc proc
mount --rbind /sys sys
mount -t tmpfs -o mode=1777 tmp tmp
chmod 1777 var/tmp
mount --bind "$2" .{NODE_ROOT}
mkdir .old
pivot_root . .old
cd /
umount -l /.old
rmdir /.old
exec {SSHD} -D -e -f {NODE_ROOT}/ssh/sshd_config
"""


def _start_sshd(node: TestNode) -> None:
    fsroot = node.root / "fsroot"  # the mount point of its root; empty on this machine
    fsroot.mkdir(mode=0o755, exist_ok=True)
    log = (node.ssh_dir / "sshd.log").open("ab")
    with log:
        node.sshd = subprocess.Popen(  # noqa: S603 (fixed programs, our own arguments)
            # ip from PATH, like every `ip` command here (iproute2 is in /usr/sbin or /sbin).
            [  # noqa: S607
                "ip",
                "netns",
                "exec",
                node.netns,
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                ROOT_SCRIPT,
                "sh",
                str(fsroot),
                str(node.root),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_SECONDS
    while True:
        if node.sshd.poll() is not None:
            tail = (node.ssh_dir / "sshd.log").read_text(errors="replace")[-2000:]
            raise TestHostsError(f"sshd of test node {node.name} exited: {tail}")
        try:
            with socket.create_connection((node.node_ip, node.port), timeout=0.5) as sock:
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TestHostsError(f"sshd of test node {node.name} did not listen in time")
        time.sleep(0.05)


def _ip_present() -> bool:
    return shutil.which("ip", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is not None


def _free_networks(count: int) -> list[ipaddress.IPv4Network]:
    used = [
        ipaddress.ip_interface(address).network
        for address in re.findall(r"inet (\S+)", _run(["ip", "-4", "addr"]))
    ]
    for netns in _namespaces():
        with contextlib.suppress(TestHostsError):
            out = _run(["ip", "-n", netns, "-4", "addr"])
            used += [ipaddress.ip_interface(a).network for a in re.findall(r"inet (\S+)", out)]
    subnets: list[ipaddress.IPv4Network] = list(POOL.subnets(new_prefix=30))
    start = (os.getpid() * 7) % len(subnets)
    found: list[ipaddress.IPv4Network] = []
    for offset in range(len(subnets)):
        candidate = subnets[(start + offset) % len(subnets)]
        if not any(candidate.overlaps(other) for other in used):
            found.append(candidate)
            if len(found) == count:
                return found
    raise TestHostsError(f"no free /30 network left in {POOL}")


def _reap_leftovers() -> None:
    """Delete the namespaces and veths of test nodes whose process died without `stop()`."""
    pattern = re.compile(rf"^{PREFIX}(\d+)-\d+$")
    for netns in _namespaces():
        match = pattern.match(netns)
        if match and not _alive(int(match.group(1))):
            for pid in _run(["ip", "netns", "pids", netns], check=False).split():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _run(["ip", "netns", "del", netns], check=False)
    for veth, pid in re.findall(rf"\d+: ({PREFIX}(\d+)h\d+)@", _run(["ip", "-o", "link"])):
        if not _alive(int(pid)):
            _run(["ip", "link", "del", veth], check=False)


def _namespaces() -> list[str]:
    # `ip netns list` prints "name" or "name (id: N)" a line.
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _kill_tree(pid: int) -> None:
    # Stop first so no process forks a child after we listed it, then kill them all.
    seen: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        with contextlib.suppress(ProcessLookupError):
            os.kill(current, signal.SIGSTOP)
            seen.append(current)
            frontier += _children(current)
    for current in seen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(current, signal.SIGKILL)


def _run(argv: list[str], *, check: bool = True) -> str:
    done = subprocess.run(  # noqa: S603 (fixed programs, our own arguments)
        argv,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"},
    )
    if check and done.returncode != 0:
        raise TestHostsError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout
