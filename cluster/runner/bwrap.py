"""Level 1 on this node: one profile run in a bubblewrap sandbox, as its unprivileged uid.

The sandbox sees only what is mounted: /usr and a few /etc files read-only, a synthetic passwd and
group, private /proc, /dev and /tmp, the worktree read-write at /workspace with its git metadata
read-only, an environment read-only at /env when the profile names one, the run's egress socket
when it has one, and no network but loopback. The seccomp filter (built by the control plane)
refuses namespaces, mounts, ptrace and the like; util-linux `prlimit` bounds each process; a
cgroup bounds the sandbox as a whole where the node has one (`cgroups`); `Watcher` enforces
the wall clock, the output cap, the disk quota and cancellation.

bwrap run by root keeps root's power over root-owned files, so it never is: as root the runner
drops to the profile's uid before it starts bwrap and refuses uid 0.
"""

from __future__ import annotations

import contextlib
import grp
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.runner import cgroups
from cluster.runner.protocol import Limits, Profile, invalid, unavailable
from cluster.runner.watch import Watch, Watcher

WORKSPACE = "/workspace"
ENV = "/env"
EGRESS_SOCKET = "/run/agentos/egress.sock"
# The in-sandbox end of egress (cluster.runner.forwarder, a copy of this file's neighbour):
# 127.0.0.1:3128 inside relayed to EGRESS_SOCKET; the command starts once it listens.
FORWARDER = Path(__file__).with_name("forwarder.py")
FORWARDER_INSIDE = "/run/agentos/forwarder.py"
WITH_FORWARDER = ["/bin/sh", "-c", f'/usr/bin/python3 -I {FORWARDER_INSIDE} && exec "$@"', "egress"]
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_TMP = "/tmp"  # noqa: S108 (a private tmpfs inside the sandbox, not the host's /tmp)
SANDBOX_SHM = "/dev/shm"  # noqa: S108 (likewise)
NOBODY = 65534
# Per-run uids of the control plane start here (`cluster.identity.UID_BASE`): their group has no
# name on the node, the synthetic group file names it after the user.
UID_BASE = 2_000_000_000
# Host directories never mounted as a workspace or git metadata: the system's own, and the paths
# the sandbox builds itself.
RESERVED = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    WORKSPACE,
)

# Called once the sandbox's first process exists (its pid, which is also its process group, and
# its cgroup directories), before it may run anything: the runner records it for the kill switch.
Started = Callable[[int, list[Path]], None]


# --- The node's tools ------------------------------------------------------------------------


@dataclass(frozen=True)
class Tools:
    bwrap: str
    prlimit: str
    disable_userns: bool
    tmpfs_size: bool  # bwrap 0.8's --size


_tools: Tools | None = None
_checked: tuple[bool, str] | None = None
_lock = threading.Lock()


def tools() -> Tools:
    """bwrap and prlimit on this node, found once per process; -32011 naming the fix if not."""
    global _tools
    with _lock:
        if _tools is not None:
            return _tools
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise unavailable(
                "bubblewrap is not installed (no `bwrap` on PATH): apt-get install bubblewrap"
                " (scripts/system-deps does it)"
            )
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            raise unavailable("util-linux `prlimit` is missing: apt-get install util-linux")
        usage = subprocess.run(  # noqa: S603 (bwrap found above, fixed flag)
            [bwrap, "--help"], capture_output=True, text=True, check=False
        ).stdout
        _tools = Tools(bwrap, prlimit, "--disable-userns" in usage, "--size" in usage)
        return _tools


def available() -> tuple[bool, str]:
    """Whether level 1 works here: `true` in a sandbox (as nobody when root), once per process."""
    global _checked
    if _checked is not None:
        return _checked
    try:
        uid = NOBODY if os.geteuid() == 0 else os.getuid()
        gid = NOBODY if os.geteuid() == 0 else os.getgid()
        trial = Profile(
            level=1,
            argv=["true"],
            workdir=None,
            writable=False,
            uid=uid,
            gid=gid,
            user="nobody",
            limits=Limits(30, 256 << 20, 16, 1 << 20, 10, 4096, 0),
            seccomp=b"",
            env={},
            stdin=b"",
            stderr_apart=False,
            egress_socket=None,
            environment=None,
        )
        result = run(trial)
    except Exception as error:
        _checked = (False, str(error))
        return _checked
    if result["exit_code"] != 0:
        _checked = (
            False,
            f"bubblewrap cannot start a sandbox here ({result['output'].strip()}). It needs"
            " unprivileged user namespaces: sysctl user.max_user_namespaces > 0 (and"
            " kernel.unprivileged_userns_clone=1 / on Ubuntu"
            " kernel.apparmor_restrict_unprivileged_userns=0).",
        )
    else:
        _checked = (True, "")
    return _checked


# --- What the sandbox sees -------------------------------------------------------------------


def workdir(path: Path) -> Path:
    resolved = path.resolve()
    if not resolved.is_dir():
        raise invalid(f"profile.workdir: the workdir {path} is not a directory")
    if resolved == Path("/") or any(resolved.is_relative_to(top) for top in RESERVED):
        raise invalid(
            f"profile.workdir: the workdir {path} is a system directory; refusing to mount it"
        )
    return resolved


def check_reachable(path: Path, uid: int, gid: int) -> None:
    if uid == 0:
        return
    groups = {gid} if os.geteuid() == 0 else {gid, *os.getgroups()}
    for directory in reversed(path.parents):
        info = directory.stat()
        if info.st_uid == uid:
            searchable = info.st_mode & stat.S_IXUSR
        elif info.st_gid in groups:
            searchable = info.st_mode & stat.S_IXGRP
        else:
            searchable = info.st_mode & stat.S_IXOTH
        if not searchable:
            raise unavailable(
                f"the sandbox user (uid {uid}) cannot reach {path}: {directory} is not searchable"
                f" by it (mode {stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid}). Put"
                " worktrees under a directory it can traverse (AGENTOS_WORKSPACES_DIR), or"
                f" chmod o+x {directory} yourself."
            )


def git_mounts(workdir: Path, *, writable: bool) -> list[str]:
    """Binds that protect the worktree's git metadata.

    `.git` as a directory (a standalone repository, what runs get) is re-bound read-only over
    itself, unless `writable` (a git tool's own step), then it stays part of the writable workdir.
    `.git` as a file (a linked worktree, "gitdir: <path>") is bound read-only, and the gitdir and
    common dir it names are not mounted at all: the common dir's `config` holds remote URLs and
    tokens and its `worktrees/` shows other runs. git inside then finds no repository.
    """
    dot_git = workdir / ".git"
    try:
        info = os.lstat(dot_git)
    except FileNotFoundError:
        return []
    inside = f"{WORKSPACE}/.git"
    if stat.S_ISDIR(info.st_mode):
        return [] if writable else ["--ro-bind", str(dot_git), inside]
    if not stat.S_ISREG(info.st_mode):
        # A symlink could point back into the writable workspace: refuse rather than guess.
        raise invalid(f"{dot_git} is neither a directory nor a gitdir file; refusing to run")
    return ["--ro-bind", str(dot_git), inside]


def _system_mounts() -> list[str]:
    mounts = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/", name)
        if host.is_symlink():
            mounts += ["--symlink", str(host.readlink()), str(host)]
        elif host.is_dir():
            mounts += ["--ro-bind", str(host), str(host)]
    mounts += ["--perms", "0755", "--dir", "/etc"]  # bwrap would make it 0700
    for name in ("/etc/alternatives", "/etc/ssl", "/etc/ld.so.cache"):
        if Path(name).exists():
            mounts += ["--ro-bind", name, name]
    return mounts


# The system git config inside. The repository's own config would win over it, but the sandbox
# cannot write `.git/config` (read-only) and the git tools pass their own `-c` for what they need.
GITCONFIG = b"""\
[safe]
\tdirectory = *
[core]
\thooksPath = /dev/null
\tfsmonitor = false
[protocol]
\tallow = never
[submodule]
\trecurse = false
[user]
\tname = agentos
\temail = agent@agentos.invalid
[commit]
\tgpgsign = false
[init]
\tdefaultBranch = main
"""


def _account_files(uid: int, gid: int, user: str) -> dict[str, bytes]:
    """A passwd and group naming only the sandbox identity and nobody (what unmapped ids show as),
    so tools that look the user up work without seeing the host's accounts. Also a system git
    config: any repository trusted (the worktree may belong to another uid than the step's), no
    hooks, no fsmonitor, no transport at all (nothing fetches or pushes from inside), no submodule
    recursion, a fixed author, no signing. And a hosts file naming the loopback."""
    try:
        group = grp.getgrgid(gid).gr_name if gid < UID_BASE else user
    except KeyError:
        group = user
    passwd = "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"  # noqa: S105
    groups = "nogroup:x:65534:\n"
    if uid != NOBODY:
        passwd += f"{user}:x:{uid}:{gid}:agentos sandbox:/tmp:/bin/sh\n"
    if gid != NOBODY:
        groups += f"{group}:x:{gid}:\n"
    return {
        "/etc/passwd": passwd.encode(),
        "/etc/group": groups.encode(),
        "/etc/gitconfig": GITCONFIG,
        # Test suites connect to "localhost"; without a hosts file glibc would ask DNS, absent.
        "/etc/hosts": b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    }


# --- Running ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mounts:
    """What `run` mounts besides the system: the resolved worktree and an environment."""

    workdir: Path | None
    git: list[str]
    env_dir: Path | None
    env_writable: bool
    # Host directories bound read-only, (source, destination): a long-lived server's interpreter
    # and packages (`command`).
    read_only: tuple[tuple[str, str], ...] = ()


def run(
    profile: Profile,
    *,
    stopping: threading.Event | None = None,
    env_dir: Path | None = None,
    env_writable: bool = False,
    started: Started | None = None,
) -> dict[str, Any]:
    """Run `profile` to completion; the protocol's result fields that belong to the sandbox
    (exit_code, output, errors, truncated, truncated_bytes, killed, reason, out_of_memory,
    memory_limit, seconds, duration_ms). `env_dir` is mounted at /env (read-only unless
    `env_writable`, an environment being built)."""
    if os.geteuid() == 0 and (profile.uid == 0 or profile.gid == 0):
        raise invalid("profile.uid/gid: a sandbox never runs as root (uid or gid 0)")
    if os.geteuid() != 0 and profile.uid != os.getuid():
        raise invalid(f"profile.uid: this runner is not root and can only run as uid {os.getuid()}")
    resolved = workdir(profile.workdir) if profile.workdir is not None else None
    git = git_mounts(resolved, writable=profile.writable) if resolved is not None else []
    for reached in (resolved, env_dir):
        if reached is not None:
            check_reachable(reached, profile.uid, profile.gid)
    if profile.egress_socket is not None and not profile.egress_socket.is_socket():
        raise invalid(f"profile.egress_socket: {profile.egress_socket} is not a socket")
    mounts = Mounts(resolved, git, env_dir, env_writable)
    return _execute(tools(), profile, mounts, stopping, started)


def command(profile: Profile, mounts: Mounts, fds: list[int]) -> list[str]:
    """The whole command line of `profile` (prlimit, bwrap, then its argv, behind the egress
    forwarder when it has one) for a caller that keeps the process itself: a long-lived server
    talking over its stdin and stdout. No cgroup, gate or watcher: the rlimits bound it, bwrap's
    --die-with-parent ends it with its caller, and the caller bounds its time. `fds` collects
    the descriptors the caller passes to the process (and closes after starting it)."""
    if os.geteuid() == 0 and (profile.uid == 0 or profile.gid == 0):
        raise invalid("profile.uid/gid: a sandbox never runs as root (uid or gid 0)")
    if mounts.workdir is not None:
        check_reachable(mounts.workdir, profile.uid, profile.gid)
    argv = [*WITH_FORWARDER, *profile.argv] if profile.egress_socket else profile.argv
    return [*_command(tools(), profile, mounts, fds, per_sandbox=False), "--", *argv]


@contextlib.contextmanager
def _memfds() -> Iterator[list[int]]:
    fds: list[int] = []
    try:
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def _memfd(fds: list[int], content: bytes) -> str:
    fd = os.memfd_create("agentos-sandbox")
    fds.append(fd)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return str(fd)


def _execute(
    found: Tools,
    profile: Profile,
    mounts: Mounts,
    stopping: threading.Event | None,
    started_hook: Started | None,
) -> dict[str, Any]:
    """1. Set up the cgroup. 2. Start the command behind a gate (a shell waiting for a line on its
    stdin), as the sandbox identity. 3. Record it (`started_hook`), move the gate into the cgroup,
    then open it: nothing the command starts is ever outside. 4. Supervise it until its whole tree
    is gone. 5. Remove the cgroup."""
    limits = profile.limits
    group = cgroups.create(cgroups.Caps(limits.memory_bytes, limits.processes, limits.cpus))
    try:
        with _memfds() as fds:
            command = _command(found, profile, mounts, fds, per_sandbox=group is not None)
            info_read, info_write = os.pipe()
            fds += [info_read, info_write]
            argv = [*WITH_FORWARDER, *profile.argv] if profile.egress_socket else profile.argv
            command += ["--info-fd", str(info_write), "--", *argv]
            gated = group is not None or started_hook is not None
            if gated:
                # `read` takes one byte at a time from a pipe: the gate's line never reaches the
                # command. Without it (EOF: we died before opening) the command never runs.
                command = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "agentos-gate", *command]
            # Never root: bwrap started by root keeps root's power over root-owned files.
            drop: dict[str, Any] = {}
            if os.geteuid() == 0:
                drop = {"user": profile.uid, "group": profile.gid, "extra_groups": []}
            began = time.monotonic()
            # --die-with-parent fires when this thread ends; run() blocks it until the sandbox is
            # gone.
            process = subprocess.Popen(  # noqa: S603 (argv is the sandboxed command, by design)
                command,
                stdin=subprocess.PIPE if profile.stdin or gated else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if profile.stderr_apart else subprocess.STDOUT,
                # Nothing of ours reaches bwrap's own processes (its pid 1 keeps its environment).
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                cwd="/",
                pass_fds=[fd for fd in fds if fd != info_read],
                start_new_session=True,
                **drop,
            )
            fds.remove(info_write)
            os.close(info_write)
            if gated:
                opened = _open_gate(
                    process, group, started_hook, stopping, keep_stdin=bool(profile.stdin)
                )
                if not opened:
                    return cancelled_at_start(process, began, limits)
            watch = Watch(
                wall_seconds=limits.wall_seconds,
                output_bytes=limits.output_bytes,
                stopping=stopping,
                stdin=profile.stdin,
                workspace=mounts.workdir,
                disk_bytes=limits.disk_bytes,
            )
            watcher = Watcher(process, info_read, watch, began)
            try:
                outcome = watcher.run()
            finally:
                watcher.close()
        oom = group.oom_kills() if group is not None else 0
    finally:
        if group is not None:
            group.remove()
    killed = (
        "timeout"
        if outcome.timed_out
        else "cancelled"
        if outcome.cancelled
        else "disk"
        if outcome.killed
        else None
    )
    return {
        "exit_code": outcome.code,
        "output": outcome.output.decode("utf-8", errors="replace"),
        "errors": outcome.errors.decode("utf-8", errors="replace"),
        "truncated": outcome.dropped > 0,
        "truncated_bytes": outcome.dropped,
        "killed": killed,
        "reason": outcome.killed,
        "out_of_memory": oom,
        "memory_limit": limits.memory_bytes,
        "seconds": outcome.duration_ms / 1000,
        "duration_ms": outcome.duration_ms,
    }


def _open_gate(
    process: subprocess.Popen[bytes],
    group: cgroups.Group | None,
    started_hook: Started | None,
    stopping: threading.Event | None,
    *,
    keep_stdin: bool,
) -> bool:
    """Record the gated process, move it into the cgroup, open the gate. False when the sandbox
    was stopped meanwhile (a cancel or the kill switch killed the gate): it never ran."""
    if process.stdin is None:
        raise ValueError("the gate needs the process's stdin")
    try:
        if started_hook is not None:
            started_hook(process.pid, group.directories() if group is not None else [])
        if group is not None:
            group.add(process.pid)
        process.stdin.write(b"go\n")
        process.stdin.flush()
    except (cgroups.CgroupError, OSError) as error:
        process.kill()
        process.wait()
        if stopping is not None and stopping.is_set():
            return False
        raise unavailable(f"cannot put the sandbox in its cgroup: {error}") from error
    except BaseException:
        process.kill()
        process.wait()
        raise
    if not keep_stdin:
        process.stdin.close()
    return True


def cancelled_at_start(
    process: subprocess.Popen[bytes] | None, began: float, limits: Limits
) -> dict[str, Any]:
    """The result of a sandbox stopped before its command ran."""
    for stream in (process.stdin, process.stdout, process.stderr) if process else ():
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    duration_ms = int((time.monotonic() - began) * 1000)
    return {
        "exit_code": None,
        "output": "",
        "errors": "",
        "truncated": False,
        "truncated_bytes": 0,
        "killed": "cancelled",
        "reason": "",
        "out_of_memory": 0,
        "memory_limit": limits.memory_bytes,
        "seconds": duration_ms / 1000,
        "duration_ms": duration_ms,
    }


def _command(
    found: Tools, profile: Profile, mounts: Mounts, fds: list[int], *, per_sandbox: bool
) -> list[str]:
    """prlimit then bwrap, up to (not including) the info fd and the command."""
    limits = profile.limits
    address_space = limits.address_space_bytes
    if address_space is None and not per_sandbox:
        address_space = limits.memory_bytes
    command = [found.prlimit]
    if not per_sandbox:
        # Per uid: with a uid per run, per run; the cgroup's pids.max replaces it when there is one
        # (runs without an id share the named user, and one must not starve the others).
        command.append(f"--nproc={limits.processes}")
    if address_space is not None:
        command.append(f"--as={address_space}")
    path = SANDBOX_PATH if mounts.env_dir is None else f"{ENV}/bin:{SANDBOX_PATH}"
    command += [
        f"--fsize={limits.file_bytes}",
        # SIGXCPU at the limit (a chance to say so), SIGKILL a second later.
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        "--core=0",
        "--",
        found.bwrap,
        "--unshare-all",
        "--unshare-user",  # explicit: --unshare-all only tries, and --disable-userns needs it
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *("--setenv", "PATH", path),
        *("--setenv", "HOME", SANDBOX_TMP),
        *("--setenv", "LANG", "C.UTF-8"),
    ]
    for key, value in sorted(profile.env.items()):
        command += ["--setenv", key, value]
    command += _system_mounts()
    for dest, content in _account_files(profile.uid, profile.gid, profile.user).items():
        command += ["--perms", "0644", "--ro-bind-data", _memfd(fds, content), dest]
    # Every writable tmpfs has a size (RAM the memory cgroup charges, but a size says ENOSPC
    # before the OOM killer picks a victim). /dev itself is read-only after bwrap filled it: its
    # device nodes still work (/dev/null takes writes), new files cannot be stored there.
    size = ["--size", str(limits.tmp_bytes)] if found.tmpfs_size else []
    command += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", SANDBOX_SHM]
    command += ["--remount-ro", "/dev", *size, "--tmpfs", SANDBOX_TMP]
    if mounts.env_dir is not None:
        command += ["--bind" if mounts.env_writable else "--ro-bind", str(mounts.env_dir), ENV]
    if profile.egress_socket is not None:
        command += ["--bind", str(profile.egress_socket), EGRESS_SOCKET]
        forwarder = _memfd(fds, FORWARDER.read_bytes())
        command += ["--perms", "0444", "--ro-bind-data", forwarder, FORWARDER_INSIDE]
    if mounts.workdir is not None:
        command += ["--bind", str(mounts.workdir), WORKSPACE, *mounts.git]
        command += ["--chdir", WORKSPACE]
    else:
        command += ["--chdir", ENV if mounts.env_writable else SANDBOX_TMP]
    for source, dest in mounts.read_only:
        command += ["--ro-bind", source, dest]
    # The root itself is a tmpfs bwrap built: nothing outside the binds is writable.
    command += ["--remount-ro", "/"]
    if found.disable_userns:
        command.append("--disable-userns")
    if profile.seccomp:
        command += ["--seccomp", _memfd(fds, profile.seccomp)]
    return command
