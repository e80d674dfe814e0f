"""Sandbox level 2: one disposable QEMU virtual machine per command.

The guest is the node's own Debian kernel (`vmimage`) booted into a busybox initramfs. Its root is
read-only; the host's `/usr` is shared read-only over virtio-9p (python3, git, sh are the node's);
/tmp and /dev/shm are sized tmpfs; the worktree is shared read-write at /workspace (its `.git`
read-only, as at level 1). The command runs as the profile's uid with no_new_privs, under
prlimit's limits. Its output, and the guest init's status line, come back over virtio serial
ports into pipes the runner reads: nothing the agent wrote is ever parsed on the host.

Network: none at all without `profile.egress_socket`. With it, only QEMU's user network in
`restrict=on` mode (no route out) whose one forward, 10.0.2.100:3128, is a `socat` to the run's
egress socket; http_proxy and https_proxy (both cases) point there.

QEMU itself runs as the profile's uid inside a bubblewrap sandbox (no network namespace of the
host, only /usr, the worktree and the egress socket mounted) with its own seccomp filter
(`-sandbox`): a bug in QEMU's device emulation lands in a level-1 sandbox, not on the host. The
VM is killed at the wall clock or when `stopping` is set; nothing of it outlives `run_vm` (the
per-run archive is a memfd, there are no scratch files).

The accelerator is chosen once per node by booting the image: KVM when a short boot succeeds,
else TCG (what nested machines without a PVM guest kernel get; 6 to 7 s of CPU per boot).

This module checks the node once (`prepare`) and takes a profile in (`run_vm`); `vmlaunch` builds
what a VM starts with, `vmrun` starts one and watches it until it is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from cluster.runner import bwrap, files, vmimage
from cluster.runner.protocol import (
    Limits,
    Profile,
    RpcError,
    invalid,
    parse_profile,
    unavailable,
)
from cluster.runner.vmlaunch import GUEST_TOOLS, MIN_MEMORY, Node
from cluster.runner.vmrun import VmUnavailable, boot

QEMU = "qemu-system-x86_64"
# A boot is the kernel, the modules and the 9p mounts: seconds under TCG, more on a loaded node.
BOOT_SECONDS = {"kvm": 30.0, "tcg": 120.0}
PROBE_SECONDS = {"kvm": 20.0, "tcg": 120.0}


# --- Availability ------------------------------------------------------------------------------


_node: dict[Path, Node] = {}
_node_lock = threading.Lock()


def available(kernel_dir: Path | None = None) -> tuple[bool, str]:
    """(True, what runs it) when a VM boots here; (False, why not) otherwise. The first call on a
    node builds the image and boots it once (the accelerator probe); later ones are instant."""
    try:
        node = prepare(kernel_dir)
    except VmUnavailable as error:
        return False, f"level 2 unavailable: {error}"
    return True, f"QEMU ({node.accelerator})"


def prepare(kernel_dir: Path | None = None) -> Node:
    """The node's QEMU, image and accelerator, checked once per process (and the accelerator once
    per image, remembered next to it)."""
    kernel_dir = kernel_dir or vmimage.KERNEL_DIR
    with _node_lock:
        if kernel_dir in _node:
            return _node[kernel_dir]
        qemu, socat = shutil.which(QEMU), shutil.which("socat")
        if qemu is None:
            raise VmUnavailable(
                f"QEMU is not installed (no {QEMU}): apt-get install --no-install-recommends"
                " qemu-system-x86 (scripts/system-deps does it)"
            )
        if socat is None:
            raise VmUnavailable("socat is not installed: apt-get install socat")
        # The guest runs the command through the host's util-linux (its /usr is the host's).
        for tool in GUEST_TOOLS:
            if not Path(tool).is_file():
                raise VmUnavailable(f"{tool} is missing: apt-get install util-linux")
        cache = _image_cache(kernel_dir)
        try:
            bwrap.tools()  # QEMU runs in bubblewrap
            with _locked(cache):
                image = vmimage.image(kernel_dir, cache)
            node = Node(qemu, socat, image, "")
            node = replace(node, accelerator=_accelerator(node, cache))
        except (vmimage.ImageError, OSError) as error:
            raise VmUnavailable(str(error)) from error
        except RpcError as error:
            raise VmUnavailable(error.message) from error
        _node[kernel_dir] = node
        return node


def _image_cache(kernel_dir: Path) -> Path:
    """Where the image is built: AGENTOS_VM_IMAGE_DIR, else next to the kernel (root), else the
    user's cache (an unprivileged runner cannot write /var/cache)."""
    configured = os.environ.get("AGENTOS_VM_IMAGE_DIR")
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return kernel_dir.parent / "vm-images"
    return Path.home() / ".cache" / "agentos" / "vm-images"


def _locked(directory: Path) -> contextlib.AbstractContextManager[None]:
    """One process at a time builds the image or probes (others wait, then find the result)."""
    directory.mkdir(parents=True, exist_ok=True)
    return files.locked(directory / ".lock")


def _accelerator(node: Node, cache: Path) -> str:
    """KVM if a VM boots with it within PROBE_SECONDS, else TCG if one boots at all."""
    record = cache / node.image.key / "accelerator.json"
    with _locked(cache):
        known = files.read_json(record)
        if isinstance(known, dict) and known.get("qemu") == _qemu_identity(node.qemu):
            return str(known["accelerator"])
        failures = []
        candidates = ["kvm", "tcg"] if _kvm_usable() else ["tcg"]
        for accelerator in candidates:
            trial = replace(node, accelerator=accelerator)
            try:
                result = boot(trial, _probe_profile(), None, PROBE_SECONDS[accelerator])
            except VmUnavailable as error:
                failures.append(f"{accelerator}: {error}")
                continue
            if result["exit_code"] == 0:
                files.write_json(
                    record, {"qemu": _qemu_identity(node.qemu), "accelerator": accelerator}
                )
                return accelerator
            failures.append(f"{accelerator}: the probe exited {result['exit_code']}")
        raise VmUnavailable("no accelerator boots a VM here (" + "; ".join(failures) + ")")


def _kvm_usable() -> bool:
    """QEMU runs as the run's uid with the device's group: a root-only /dev/kvm is of no use."""
    try:
        info = Path("/dev/kvm").stat()
    except OSError:
        return False
    return stat.S_ISCHR(info.st_mode) and info.st_gid != 0 and info.st_mode & 0o060 == 0o060


def _qemu_identity(qemu: str) -> str:
    info = Path(qemu).resolve().stat()
    return f"{Path(qemu).resolve()}:{info.st_size}:{info.st_mtime_ns}"


def _probe_profile() -> Profile:
    ids = 65534 if os.geteuid() == 0 else os.getuid()
    return Profile(
        level=2,
        argv=["true"],
        workdir=None,
        writable=False,
        uid=ids,
        gid=ids if os.geteuid() == 0 else os.getgid(),
        user="nobody",
        limits=Limits(30, MIN_MEMORY, 16, 1 << 20, 10, 4096, 0),
        seccomp=b"",
        env={},
        stdin=b"",
        stderr_apart=False,
        egress_socket=None,
        environment=None,
    )


# --- Running -----------------------------------------------------------------------------------


def run_vm(
    profile: dict[str, Any] | Profile,
    *,
    state_dir: Path | None = None,
    stopping: threading.Event | None = None,
    kernel_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the profile's command in a fresh VM; the protocol's sandbox result fields (those of
    `bwrap.run`, plus `boot_seconds`). `state_dir` is the runner's, where the frozen environment
    a profile names is found (shown read-only at /env); the VM itself keeps nothing there."""
    if not isinstance(profile, Profile):
        profile = parse_profile(profile)
    profile, env_dir = checked(profile, state_dir)
    try:
        node = prepare(kernel_dir)
    except VmUnavailable as error:
        raise unavailable(f"level 2 unavailable: {error}") from error
    try:
        return boot(node, profile, stopping, BOOT_SECONDS[node.accelerator], env_dir)
    except VmUnavailable as error:
        raise unavailable(f"level 2: {error}") from error


def checked(profile: Profile, state_dir: Path | None) -> tuple[Profile, Path | None]:
    """The profile with its workdir resolved, and its frozen environment's directory; refused
    (-32602) when a VM of it must not run here. A warm VM's commands are checked the same."""
    if profile.level != 2:
        raise ValueError(f"run_vm runs level 2 profiles, not level {profile.level}")
    if os.geteuid() == 0 and (profile.uid == 0 or profile.gid == 0):
        raise invalid("profile.uid/gid: a sandbox never runs as root (uid or gid 0)")
    if os.geteuid() != 0 and profile.uid != os.getuid():
        raise invalid(f"profile.uid: this runner can only run as uid {os.getuid()}")
    if profile.workdir is not None:
        resolved = bwrap.workdir(profile.workdir)
        bwrap.check_reachable(resolved, profile.uid, profile.gid)
        profile = replace(profile, workdir=resolved)
    if profile.egress_socket is not None and not profile.egress_socket.is_socket():
        raise invalid(f"profile.egress_socket: {profile.egress_socket} is not a socket")
    env_dir = None
    if profile.environment is not None:
        name, version = profile.environment
        built = state_dir / "environments" / name if state_dir is not None else None
        if built is None or not (built / f"{version}.json").is_file():
            raise invalid(f"profile.environment: {name}@{version} is not built on this node")
        env_dir = built / version
    return profile, env_dir
