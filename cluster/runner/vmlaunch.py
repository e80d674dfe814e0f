"""What one level-2 VM starts with: the guest's per-run archive (its settings, the command, stdin,
/etc) and the command line that starts QEMU inside its own bubblewrap sandbox. `vmrun` starts it.
"""

from __future__ import annotations

import math
import os
import shlex
import stat
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from cluster.runner import bwrap, vmimage
from cluster.runner.protocol import Profile, invalid

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
MIN_MEMORY = 256 << 20  # below this the kernel and the 9p caches do not fit
TRANSLATION_CACHE_MB = 256  # TCG's code buffer (1 GiB by default), part of QEMU's footprint
PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
)
ETC_COPIED = ("/etc/alternatives", "/etc/ssl", "/etc/ld.so.cache")


@dataclass(frozen=True)
class Node:
    """The node's QEMU, socat, image and accelerator, as `vm.prepare` checked them."""

    qemu: str
    socat: str
    image: vmimage.Image
    accelerator: str  # "kvm" or "tcg"


def git_mode(workdir: Path, writable: bool) -> str:
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


def run_archive(
    profile: Profile, git: str, *, environment: bool = False, server: bytes | None = None
) -> bytes:
    """What the guest's init reads: its settings, the command as a shell script (every word
    quoted by us), stdin, and /etc (accounts, hosts, git config, the host's world-readable CA
    certificates and alternatives). With `server` (a warm VM, `vmwarm`) the init runs that
    command server instead of the command."""
    limits = profile.limits
    settings = {
        "TMP_BYTES": limits.tmp_bytes,
        "WORKSPACE": int(profile.workdir is not None),
        "GIT": git,
        "NET": int(profile.egress_socket is not None),
        "STDERR_APART": int(profile.stderr_apart),
        "ENV": int(environment),
        "WARM": int(server is not None),
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
    if server is not None:
        archive.file("run/agentos/server.py", server, 0o600)
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


def bwrap_command(node: Node, profile: Profile, env_dir: Path | None, info_fd: int) -> list[str]:
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


def qemu_command(
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
        *share("usr", "/usr", readonly=True),
    ]
    if profile.workdir is not None:
        command += share("workspace", bwrap.WORKSPACE, readonly=False)
        if git == "dir":
            command += share("git", f"{bwrap.WORKSPACE}/.git", readonly=True)
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


def share(tag: str, path: str, *, readonly: bool) -> list[str]:
    options = f"local,id={tag},path={path},security_model=none"
    return [
        *("-fsdev", options + (",readonly=on" if readonly else "")),
        *("-device", f"virtio-9p-pci,fsdev={tag},mount_tag={tag}"),
    ]
