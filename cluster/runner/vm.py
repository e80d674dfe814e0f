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
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, replace
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
from cluster.runner.watch import DiskWatch

QEMU = "qemu-system-x86_64"
PROXY_ADDRESS = "10.0.2.100:3128"  # QEMU's guestfwd: the egress socket, inside the guest
GUEST_SOCKET = "/run/agentos/egress.sock"  # where bubblewrap shows QEMU the egress socket
GUEST_TOOLS = ("/usr/bin/prlimit", "/usr/bin/setpriv")
GUEST_PATH = "/usr/local/bin:/usr/bin:/bin"
# mitigations=off: the guest's processes are all the run's; the host's own protections are not
# the guest kernel's to give (and under TCG every syscall's mitigation costs). The rest is boot
# time measured under TCG (initcall_debug): the crypto self-tests were a third of the kernel's
# start, the kprobe tracer's and a KDF self-test's initcalls about a second together, and
# expedited RCU grace periods shorten the initcalls that wait for them.
KERNEL_ARGS = " ".join(
    (
        "console=ttyS0 quiet panic=-1 rdinit=/init mitigations=off",
        "cryptomgr.notests rcupdate.rcu_expedited=1",
        "initcall_blacklist=init_kprobe_trace,crypto_kdf108_init",
    )
)
# A boot is the kernel, the modules and the 9p mounts: seconds under TCG, more on a loaded node.
BOOT_SECONDS = {"kvm": 30.0, "tcg": 120.0}
PROBE_SECONDS = {"kvm": 20.0, "tcg": 120.0}
MIN_MEMORY = 256 << 20  # below this the kernel and the 9p caches do not fit
TRANSLATION_CACHE_MB = 256  # TCG's code buffer (1 GiB by default), part of QEMU's footprint
CONSOLE_KEPT = 16 << 10  # the tail of the guest console kept to explain a failed boot
INFO_SECONDS = 2.0  # how long a kill waits for bubblewrap to name its pid 1
DRAIN_SECONDS = 5.0  # after QEMU exits, how long its pipes may take to close
PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
)
ETC_COPIED = ("/etc/alternatives", "/etc/ssl", "/etc/ld.so.cache")


class VmUnavailable(RuntimeError):
    """Level 2 cannot run here, or this VM could not boot; the message says why."""


# --- Availability ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    qemu: str
    socat: str
    image: vmimage.Image
    accelerator: str  # "kvm" or "tcg"


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
                result = _boot(trial, _probe_profile(), None, PROBE_SECONDS[accelerator])
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
    try:
        node = prepare(kernel_dir)
    except VmUnavailable as error:
        raise unavailable(f"level 2 unavailable: {error}") from error
    try:
        return _boot(node, profile, stopping, BOOT_SECONDS[node.accelerator], env_dir)
    except VmUnavailable as error:
        raise unavailable(f"level 2: {error}") from error


def _git(workdir: Path, writable: bool) -> str:
    """How the guest protects `.git`: "dir" (a read-only 9p share over it), "file" (a linked
    worktree's pointer, bound read-only by the guest), or "none"."""
    try:
        info = os.lstat(workdir / ".git")
    except FileNotFoundError:
        return "none"
    if stat.S_ISDIR(info.st_mode):
        return "none" if writable else "dir"
    if stat.S_ISREG(info.st_mode):
        return "file"
    raise invalid(f"profile.workdir: {workdir}/.git is neither a directory nor a file")


def _run_archive(profile: Profile, git: str, *, environment: bool = False) -> bytes:
    """What the guest's init reads: its settings, the command as a shell script (every word
    quoted by us), stdin, and /etc (accounts, hosts, git config, the host's world-readable CA
    certificates and alternatives)."""
    limits = profile.limits
    settings = {
        "TMP_BYTES": limits.tmp_bytes,
        "WORKSPACE": int(profile.workdir is not None),
        "GIT": git,
        "NET": int(profile.egress_socket is not None),
        "STDERR_APART": int(profile.stderr_apart),
        "ENV": int(environment),
    }
    path = f"{bwrap.ENV}/bin:{GUEST_PATH}" if environment else GUEST_PATH
    env = {"PATH": path, "HOME": bwrap.SANDBOX_TMP, "LANG": "C.UTF-8", **profile.env}
    if profile.egress_socket is not None:
        for name in PROXY_VARIABLES:
            env[name] = _guest_proxy(env.get(name))
    words = [
        "exec",
        GUEST_TOOLS[0],
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        "--core=0",
        "--",
        GUEST_TOOLS[1],
        f"--reuid={profile.uid}",
        f"--regid={profile.gid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        "/.agentos/busybox",
        "env",
        "-i",
        *(f"{name}={value}" for name, value in env.items()),
        # Through `sh -c` so that an argv[0] holding "=" is a program, not an assignment.
        "/.agentos/busybox",
        "sh",
        "-c",
        'exec "$@"',
        "sh",
        *profile.argv,
    ]
    archive = vmimage.Archive()
    # Read by the guest's init (root) only: the command must not find its own setup there.
    archive.file(
        "run/agentos/config",
        "".join(f"{key}={shlex.quote(str(value))}\n" for key, value in settings.items()).encode(),
        0o600,
    )
    archive.file("run/agentos/command", (" ".join(map(shlex.quote, words)) + "\n").encode(), 0o600)
    archive.file("run/agentos/stdin", profile.stdin, 0o600)
    for path, content in bwrap._account_files(profile.uid, profile.gid, profile.user).items():
        archive.file(path.lstrip("/"), content)
    for top in ETC_COPIED:
        _copy_readable(archive, Path(top))
    return archive.finish()


def _guest_proxy(url: str | None) -> str:
    """The proxy URL as the guest reaches it: the egress forward's address, keeping the URL's
    credentials (the run's token, `http://run:<token>@127.0.0.1:3128` at level 1)."""
    if not url:
        return f"http://{PROXY_ADDRESS}"
    parts = urllib.parse.urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{PROXY_ADDRESS}" if userinfo else PROXY_ADDRESS
    return urllib.parse.urlunsplit((parts.scheme or "http", netloc, parts.path, "", ""))


def _copy_readable(archive: vmimage.Archive, path: Path) -> None:
    """Copy what any user of the host may read (never /etc/ssl/private), links as links."""
    try:
        info = path.lstat()
    except OSError:
        return
    name = str(path).lstrip("/")
    if stat.S_ISLNK(info.st_mode):
        archive.symlink(name, str(path.readlink()))
    elif stat.S_ISDIR(info.st_mode) and info.st_mode & 0o005 == 0o005:
        archive.directory(name)
        for child in sorted(path.iterdir()):
            _copy_readable(archive, child)
    elif stat.S_ISREG(info.st_mode) and info.st_mode & 0o004:
        archive.file(name, path.read_bytes())


@dataclass
class _Pipes:
    """The host ends we read, and the write ends QEMU gets (each owned by the profile's uid, so
    QEMU can open it again through /proc/self/fd)."""

    read: dict[str, int]
    write: dict[str, int]

    @classmethod
    def open(cls, names: list[str], uid: int, gid: int) -> _Pipes:
        pipes = cls({}, {})
        for name in names:
            read, write = os.pipe2(os.O_CLOEXEC)
            pipes.read[name], pipes.write[name] = read, write
            os.fchown(write, uid, gid)
        return pipes

    def close_write(self) -> None:
        for fd in self.write.values():
            os.close(fd)
        self.write.clear()

    def close(self) -> None:
        self.close_write()
        for fd in self.read.values():
            os.close(fd)
        self.read.clear()


def _boot(
    node: Node,
    profile: Profile,
    stopping: threading.Event | None,
    boot_seconds: float,
    env_dir: Path | None = None,
) -> dict[str, Any]:
    """1. Build the per-run initramfs (a memfd). 2. Start QEMU in bubblewrap as the profile's
    uid. 3. Pump the ports until the guest's init reports the exit status and QEMU is gone,
    killing it at the boot deadline, the wall clock, a stop or past the disk quota."""
    workdir = profile.workdir
    git = _git(workdir, profile.writable) if workdir is not None else "none"
    archive = _run_archive(profile, git, environment=env_dir is not None)
    # Close-on-exec like every descriptor here: only QEMU gets them (pass_fds), never a sandbox
    # that another thread of the runner starts meanwhile (the archive holds this run's stdin).
    initrd = os.memfd_create("agentos-vm-initrd")
    kernel = os.open(node.image.kernel, os.O_RDONLY)
    names = ["out", "status", "console"] + (["err"] if profile.stderr_apart else [])
    pipes = _Pipes.open(names, profile.uid, profile.gid)
    info_read, info_write = os.pipe()
    process: subprocess.Popen[bytes] | None = None
    disk = DiskWatch(workdir or Path(), profile.limits.disk_bytes)
    try:
        with Path(node.image.initrd).open("rb") as base, os.fdopen(os.dup(initrd), "wb") as out:
            shutil.copyfileobj(base, out)
        os.lseek(initrd, 0, os.SEEK_END)
        os.write(initrd, archive)
        command = _bwrap_command(node, profile, env_dir, info_write)
        command += _qemu_command(node, profile, git, kernel, initrd, pipes.write)
        if env_dir is not None:
            command += _share("env", bwrap.ENV, readonly=True)
        drop: dict[str, Any] = {}
        if os.geteuid() == 0:
            kvm_group = [Path("/dev/kvm").stat().st_gid] if node.accelerator == "kvm" else []
            drop = {"user": profile.uid, "group": profile.gid, "extra_groups": kvm_group}
        started = time.monotonic()
        process = subprocess.Popen(  # noqa: S603 (fixed programs; the guest's argv is data)
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd="/",
            pass_fds=[info_write, initrd, kernel, *pipes.write.values()],
            start_new_session=True,
            **drop,
        )
        os.close(info_write)
        info_write = -1
        pipes.close_write()
        if workdir is not None:
            disk.start()
        watch = _Watch(process, pipes, info_read, profile.limits, stopping, disk, started)
        return watch.run(boot_seconds)
    finally:
        disk.stop()
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process is not None and process.stderr is not None:
            process.stderr.close()
        for fd in (initrd, kernel, info_read, info_write):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        pipes.close()


def _bwrap_command(node: Node, profile: Profile, env_dir: Path | None, info_fd: int) -> list[str]:
    """QEMU's own level-1 sandbox: no host network, /usr read-only, the worktree, the socket."""
    command = [
        bwrap.tools().bwrap,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *("--setenv", "PATH", "/usr/bin:/bin"),
        *bwrap._system_mounts(),
        *("--proc", "/proc", "--dev", "/dev", "--tmpfs", bwrap.SANDBOX_TMP),
    ]
    if node.accelerator == "kvm":
        command += ["--dev-bind", "/dev/kvm", "/dev/kvm"]
    if profile.workdir is not None:
        command += ["--bind", str(profile.workdir), bwrap.WORKSPACE]
    if profile.egress_socket is not None:
        command += ["--bind", str(profile.egress_socket), GUEST_SOCKET]
    if env_dir is not None:
        command += ["--ro-bind", str(env_dir), bwrap.ENV]
    command += ["--remount-ro", "/", "--info-fd", str(info_fd), "--"]
    return command


def _qemu_command(
    node: Node, profile: Profile, git: str, kernel: int, initrd: int, pipes: dict[str, int]
) -> list[str]:
    limits = profile.limits
    memory_mb = max(limits.memory_bytes, MIN_MEMORY) >> 20
    cpus = max(1, min(math.ceil(limits.cpus or 1), os.cpu_count() or 1))
    accel = "kvm" if node.accelerator == "kvm" else f"tcg,tb-size={TRANSLATION_CACHE_MB}"
    # QEMU's own seccomp filter. With an egress socket QEMU starts a socat per connection, which
    # calls setsid: the filter must allow both (bubblewrap's no_new_privs still holds).
    sandbox = "on,obsolete=deny,resourcecontrol=deny"
    if profile.egress_socket is None:
        sandbox += ",elevateprivileges=deny,spawn=deny"
    command = [
        node.qemu,
        *("-accel", accel),
        *("-machine", "pc"),
        *("-m", str(memory_mb), "-smp", str(cpus)),
        "-nodefaults",
        "-no-user-config",
        "-no-reboot",
        *("-display", "none", "-monitor", "none"),
        *("-sandbox", sandbox),
        *("-kernel", f"/proc/self/fd/{kernel}", "-initrd", f"/proc/self/fd/{initrd}"),
        *("-append", KERNEL_ARGS),
        *("-serial", f"file:/proc/self/fd/{pipes['console']}"),
        *_share("usr", "/usr", readonly=True),
    ]
    if profile.workdir is not None:
        command += _share("workspace", bwrap.WORKSPACE, readonly=False)
        if git == "dir":
            command += _share("git", f"{bwrap.WORKSPACE}/.git", readonly=True)
    command += ["-device", "virtio-serial-pci"]
    for name in ("out", "err", "status"):
        if name in pipes:
            command += ["-chardev", f"file,id={name},path=/proc/self/fd/{pipes[name]}"]
            command += ["-device", f"virtserialport,chardev={name},name={name}"]
    if profile.egress_socket is not None:
        forward = f"tcp:{PROXY_ADDRESS}-cmd:{node.socat} - UNIX-CONNECT:{GUEST_SOCKET}"
        command += ["-netdev", f"user,id=net,restrict=on,guestfwd={forward}"]
        command += ["-device", "virtio-net-pci,netdev=net"]
    return command


def _share(tag: str, path: str, *, readonly: bool) -> list[str]:
    options = f"local,id={tag},path={path},security_model=none"
    return [
        *("-fsdev", options + (",readonly=on" if readonly else "")),
        *("-device", f"virtio-9p-pci,fsdev={tag},mount_tag={tag}"),
    ]


class _Watch:
    """Reads QEMU's pipes and decides when to kill it; `run` returns once QEMU is gone."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        pipes: _Pipes,
        info_fd: int,
        limits: Limits,
        stopping: threading.Event | None,
        disk: DiskWatch,
        started: float,
    ) -> None:
        self.process = process
        self.limits = limits
        self.stopping = stopping
        self.disk = disk
        self.started = started
        self.kept: dict[str, bytearray] = {name: bytearray() for name in pipes.read}
        self.kept["qemu"] = bytearray()
        self.dropped = 0
        self.selector = selectors.DefaultSelector()
        assert process.stderr is not None  # noqa: S101 (started with stderr=PIPE)
        readers = {**pipes.read, "qemu": process.stderr.fileno(), "info": info_fd}
        for name, fd in readers.items():
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, name)
        self.pidfd: int | None = None
        self.command_started: float | None = None
        self.killed: str | None = None
        self.killed_at = 0.0
        self.reason = ""

    def run(self, boot_seconds: float) -> dict[str, Any]:
        boot_deadline = self.started + boot_seconds
        exited_at: float | None = None
        while self.selector.get_map():
            now = time.monotonic()
            if exited_at is None and self.process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_SECONDS:
                break  # something still holds a pipe: QEMU is gone, stop waiting
            if self.killed is None:
                self.check(now, boot_deadline)
            elif self.pidfd is None and now - self.killed_at > INFO_SECONDS:
                self.kill_group()  # bubblewrap never said who its pid 1 is
            for key, _events in self.selector.select(0.05):
                self.read(key.fd, str(key.data))
        self.kill(final=True)
        try:
            self.process.wait(DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill_group()
            self.process.wait()
        if self.pidfd is not None:
            # bwrap's pid 1 exits only once its namespace (QEMU, socat) is gone.
            with selectors.DefaultSelector() as waiting:
                waiting.register(self.pidfd, selectors.EVENT_READ)
                waiting.select(DRAIN_SECONDS)
            os.close(self.pidfd)
        self.selector.close()
        return self.result(boot_seconds)

    def check(self, now: float, boot_deadline: float) -> None:
        if self.stopping is not None and self.stopping.is_set():
            self.killed = "cancelled"
        elif self.command_started is None and now >= boot_deadline:
            self.killed = "boot"
        elif self.command_started is not None and (
            now >= self.command_started + self.limits.wall_seconds
        ):
            self.killed = "timeout"
        elif self.disk.over.is_set():
            self.killed = "disk"
            self.reason = f"the workspace grew past {self.limits.disk_bytes // 2**20} MB"
        else:
            return
        self.killed_at = now
        self.kill()

    def kill(self, *, final: bool = False) -> None:
        """Kill bubblewrap's pid 1 (the namespace goes with it: QEMU, socat) and let bubblewrap
        outside reap it and exit: killed together, pid 1 would be left to the host's init, which
        may never reap it. Until bubblewrap names pid 1 (milliseconds after it starts) the kill
        waits for it (`note_info` kills then); the whole process group only if it never does."""
        if self.pidfd is None:
            if final:
                self.kill_group()
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def kill_group(self) -> None:
        if self.process.returncode is None:  # not reaped yet, so the group id is still ours
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def read(self, fd: int, name: str) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.selector.unregister(fd)
            return
        kept = self.kept.get(name)
        if name == "info":
            self.note_info(chunk)
        elif name in ("out", "err"):
            assert kept is not None  # noqa: S101 (registered with a buffer)
            room = max(
                self.limits.output_bytes - len(self.kept["out"]) - len(self.kept.get("err", b"")), 0
            )
            kept += chunk[:room]
            self.dropped += max(len(chunk) - room, 0)
        elif kept is not None:
            # The status and QEMU's own messages are small; the console's tail is kept.
            kept += chunk
            if name == "console" and len(kept) > CONSOLE_KEPT:
                del kept[: len(kept) - CONSOLE_KEPT]
            if name == "status" and self.command_started is None and b"start " in kept:
                self.command_started = time.monotonic()

    def note_info(self, chunk: bytes) -> None:
        self.kept.setdefault("info", bytearray()).extend(chunk)
        try:
            child = int(json.loads(self.kept["info"])["child-pid"])
        except ValueError:
            return  # not all of it yet
        except (KeyError, TypeError):
            return
        with contextlib.suppress(ProcessLookupError):
            self.pidfd = os.pidfd_open(child)
        if self.killed is not None:
            self.kill()

    def status(self) -> tuple[int | None, int]:
        """The exit code and the OOM kills the guest's init reported, if it did."""
        for line in bytes(self.kept["status"]).decode("ascii", "replace").splitlines():
            words = line.split()
            if len(words) == 4 and words[0] == "exit" and words[2] == "oom":
                with contextlib.suppress(ValueError):
                    return int(words[1]), int(words[3])
        return None, 0

    def result(self, boot_seconds: float) -> dict[str, Any]:
        code, oom = self.status()
        finished = time.monotonic()
        if self.killed == "boot" or (self.killed is None and self.command_started is None):
            console = self.kept["console"].decode("utf-8", "replace").strip()[-2000:]
            qemu = self.kept["qemu"].decode("utf-8", "replace").strip()[-2000:]
            what = f"did not boot within {boot_seconds:g} s" if self.killed else "stopped early"
            raise VmUnavailable(
                f"the virtual machine {what} (QEMU: {qemu or 'nothing'}; console: "
                f"{console or 'nothing'})"
            )
        if self.killed is None and code is None:
            raise VmUnavailable(
                "the virtual machine ended without an exit status (QEMU: "
                + (self.kept["qemu"].decode("utf-8", "replace").strip()[-2000:] or "nothing")
                + ")"
            )
        duration_ms = int((finished - self.started) * 1000)
        boot = (self.command_started or finished) - self.started
        return {
            "exit_code": None if self.killed else code,
            "output": self.kept["out"].decode("utf-8", errors="replace"),
            "errors": self.kept.get("err", bytearray()).decode("utf-8", errors="replace"),
            "truncated": self.dropped > 0,
            "truncated_bytes": self.dropped,
            "killed": self.killed or ("memory" if oom else None),
            "reason": self.reason,
            "out_of_memory": oom,
            "memory_limit": self.limits.memory_bytes,
            "seconds": duration_ms / 1000,
            "duration_ms": duration_ms,
            "boot_seconds": round(boot, 3),
        }
