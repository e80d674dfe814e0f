"""Sandboxes that run an agent's shell commands in a worktree.

Level 1 is bubblewrap (`BwrapSandbox`), started as a dedicated non-root uid: bwrap run by root
keeps root's power over root-owned files, so it never is. The sandbox sees only what is mounted:
/usr and a few /etc files read-only, a synthetic passwd/group, private /proc, /dev and /tmp, the
worktree read-write at /workspace with its git metadata read-only, and no network but loopback.
A seccomp filter (`cluster.seccomp`) refuses namespaces, mounts, ptrace and the like; rlimits set by
util-linux `prlimit` bound processes, memory, file size and CPU; a wall clock and the caller's
`stopping` event kill the whole tree.

Each run has its own uid when we are root (`identity(run_id)`: `UID_BASE + run_id`, no passwd
entry needed), so no run can signal, trace or read another's processes or files, and per-uid limits
(RLIMIT_NPROC) are per run. Commands without a run (the readiness check, `manage.py sandbox_exec`)
run as the named user `agentos-sandbox`. As an ordinary user everything runs as our own uid: per-run
uids need root.

Callers (the tools, `manage.py sandbox_exec`) use `for_level`, `identity` and `give` (both from
`cluster.identity`, re-exported); the other names are internal.
"""

from __future__ import annotations

import contextlib
import grp
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cluster import cgroups

# Re-exported (the `as` form): callers import the sandbox's whole surface from here.
from cluster.identity import DEFAULT_USER as DEFAULT_USER
from cluster.identity import MAX_RUN_ID as MAX_RUN_ID
from cluster.identity import UID_BASE as UID_BASE
from cluster.identity import SandboxUnavailable as SandboxUnavailable
from cluster.identity import give as give
from cluster.identity import identity as identity
from cluster.identity import identity_name as identity_name
from cluster.identity import sandbox_user as sandbox_user
from cluster.supervisor import Supervisor, Watch

WORKSPACE = "/workspace"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_TMP = "/tmp"  # noqa: S108 (a private tmpfs inside the sandbox, not the host's /tmp)
SANDBOX_SHM = "/dev/shm"  # noqa: S108 (likewise)
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


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use. Per sandbox where the node has cgroups
    (`limits_mode()`); otherwise `memory_bytes` caps each process and `processes` each uid."""

    wall_seconds: float = 300
    cpu_seconds: int = 300  # RLIMIT_CPU, per process
    processes: int = 256  # pids.max of the sandbox's cgroup (else RLIMIT_NPROC of its uid)
    # The sandbox's whole memory, its tmpfs pages included (cgroup; else RLIMIT_AS per process).
    memory_bytes: int = 4 << 30
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE
    output_bytes: int = 200_000  # stdout+stderr kept; the rest counted and dropped
    cpus: float | None = 1.0  # CFS quota in cores (cgroup only); None for no quota
    tmp_bytes: int = 512 << 20  # size of each writable tmpfs (/tmp, /dev/shm)
    disk_bytes: int = 10 << 30  # the workspace's allocated size; the step is killed past it
    # RLIMIT_AS per process on top of the cgroup. None: none (the cgroup caps what is resident,
    # and an address-space cap breaks runtimes that reserve much more than they use: Go, the JVM,
    # V8, sanitizers). Without cgroups `memory_bytes` is the RLIMIT_AS when this is None.
    address_space_bytes: int | None = None


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Result:
    exit_code: int | None  # None when killed by timeout / cancellation
    # stdout and stderr as produced (stdout alone with `stderr_apart`), capped, decoded (utf-8,
    # errors replaced)
    output: str
    truncated_bytes: int  # dropped from `output` and `errors` together
    timed_out: bool
    cancelled: bool
    duration_ms: int
    errors: str = ""  # stderr, capped like `output`, only when run with `stderr_apart`
    killed: str = ""  # why the sandbox killed it besides the clock or a cancellation
    out_of_memory: int = 0  # processes the kernel killed at the sandbox's memory limit
    memory_limit: int = 0  # that limit, in bytes, to say so

    def summary(self) -> str:
        """The output, then what happened, as one text for the model."""
        text = ""
        for part in (self.output, self.errors):
            text += part
            if part and not part.endswith("\n"):
                text += "\n"
        if self.truncated_bytes:
            text += f"[output truncated: {self.truncated_bytes} bytes dropped]\n"
        if self.out_of_memory:
            text += (
                f"[out of memory: {self.out_of_memory} process(es) killed at the sandbox's"
                f" {self.memory_limit // 2**20} MB limit]\n"
            )
        if self.killed:
            return text + f"[killed: {self.killed}]"
        if self.cancelled:
            return text + "[cancelled]"
        if self.timed_out:
            seconds = self.duration_ms / 1000
            shown = f"{round(seconds)}" if seconds >= 10 else f"{round(seconds, 1):g}"
            return text + f"[timed out after {shown} s, killed]"
        return text + f"[exit code {self.exit_code}]"


class Sandbox(Protocol):
    """Runs one command to completion in a worktree.

    `run` blocks until the command and everything it started are gone: it exited, the wall clock
    ran out (`timed_out`), or `stopping` was set (`cancelled`). It raises `SandboxUnavailable`
    when the node cannot sandbox (the message names the fix), and `ValueError` for a bad call
    (an empty argv, a workdir that is not a directory, a run id out of range).

    `run_id` picks the identity (`identity(run_id)`); the workdir must have been `give`n to it.
    `<workdir>/.git` is read-only unless `git_writable` (the git tools' own steps). With
    `stderr_apart` stderr goes to `Result.errors` instead of being mixed into `output`.
    """

    level: int

    def run(
        self,
        argv: list[str],
        *,
        workdir: Path,
        limits: Limits = DEFAULT_LIMITS,
        stopping: threading.Event | None = None,
        stdin: bytes = b"",
        run_id: int | None = None,
        git_writable: bool = False,
        stderr_apart: bool = False,
    ) -> Result: ...


def for_level(level: int) -> Sandbox:
    if level == 1:
        if sys.platform != "linux":
            raise SandboxUnavailable(
                f"sandbox level 1 needs Linux (bubblewrap); this is {sys.platform}"
            )
        return BwrapSandbox()
    if level == 0:
        raise SandboxUnavailable("sandbox level 0 has no shell: commands cannot run at this level")
    if level in (2, 3):
        raise SandboxUnavailable(f"sandbox level {level} (a disposable VM) is not available yet")
    raise SandboxUnavailable(f"unknown sandbox level {level}: levels are 0 to 3")


def offered_level() -> tuple[int, str]:
    """The highest sandbox level this node can run now, and why no higher one: 1 where a
    bubblewrap sandbox starts here, else 0 (no sandbox). Tools check their minimum against it."""
    try:
        _ready()
    except SandboxUnavailable as error:
        return 0, str(error)
    return 1, "levels 2 and 3 (a disposable VM) are not available yet"


def limits_mode() -> cgroups.Mode:
    """How `Limits` are enforced on this node: per sandbox (a cgroup each) or, degraded, per
    process and per uid (rlimits only). For the console and the health page."""
    return cgroups.mode()


# --- Reaching the worktree ------------------------------------------------------------------------


def _check_reachable(path: Path, uid: int, gid: int) -> None:
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
            raise SandboxUnavailable(
                f"the sandbox user (uid {uid}) cannot reach {path}: {directory} is not searchable"
                f" by it (mode {stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid}). Put"
                " worktrees under a directory it can traverse (AGENTOS_WORKSPACES_DIR), or"
                f" chmod o+x {directory} yourself."
            )


# --- What the sandbox sees ------------------------------------------------------------------------


def _workdir(workdir: Path) -> Path:
    resolved = workdir.resolve()
    if not resolved.is_dir():
        raise ValueError(f"the workdir {workdir} is not a directory")
    if _reserved(resolved):
        raise ValueError(f"the workdir {workdir} is a system directory; refusing to mount it")
    return resolved


def _reserved(path: Path) -> bool:
    return path == Path("/") or any(path.is_relative_to(reserved) for reserved in RESERVED)


def _git_mounts(workdir: Path, *, writable: bool) -> list[str]:
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
        raise ValueError(f"{dot_git} is neither a directory nor a gitdir file; refusing to run")
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
    if uid != 65534:
        passwd += f"{user}:x:{uid}:{gid}:agentos sandbox:/tmp:/bin/sh\n"
    if gid != 65534:
        groups += f"{group}:x:{gid}:\n"
    return {
        "/etc/passwd": passwd.encode(),
        "/etc/group": groups.encode(),
        "/etc/gitconfig": GITCONFIG,
        # Test suites connect to "localhost"; without a hosts file glibc would ask DNS, absent.
        "/etc/hosts": b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    }


# --- Readiness -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tools:
    bwrap: str
    prlimit: str
    seccomp: bytes
    disable_userns: bool
    tmpfs_size: bool  # bwrap 0.8's --size


_tools: _Tools | None = None
_tools_lock = threading.Lock()


def _ready() -> _Tools:
    """Find bwrap, prlimit and libseccomp, then run `true` in a sandbox once per process."""
    global _tools
    with _tools_lock:
        if _tools is not None:
            return _tools
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed (no `bwrap` on PATH): apt-get install bubblewrap"
                " (scripts/system-deps does it)"
            )
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            raise SandboxUnavailable("util-linux `prlimit` is missing: apt-get install util-linux")
        try:
            # Imported here: importing it loads libseccomp, which may be missing.
            from cluster import seccomp

            bpf = seccomp.bpf()
        except (ImportError, RuntimeError, OSError) as error:
            raise SandboxUnavailable(
                f"cannot build the seccomp filter ({error}): apt-get install libseccomp2, and"
                " pip install pyseccomp (it is in requirements.lock)"
            ) from error
        usage = subprocess.run(  # noqa: S603 (bwrap found above, fixed flag)
            [bwrap, "--help"], capture_output=True, text=True, check=False
        ).stdout
        tools = _Tools(bwrap, prlimit, bpf, "--disable-userns" in usage, "--size" in usage)
        uid, gid = identity()
        with tempfile.TemporaryDirectory(prefix="agentos-sandbox-check-", dir="/tmp") as scratch:
            give(Path(scratch))
            trial = _execute(
                tools,
                _Launch(["true"], Path(scratch), [], uid, gid, identity_name(), Limits(30)),
            )
        if trial.exit_code != 0:
            raise SandboxUnavailable(
                f"bubblewrap cannot start a sandbox here as uid {uid} ({trial.summary().strip()})."
                " It needs unprivileged user namespaces: sysctl user.max_user_namespaces > 0"
                " (and kernel.unprivileged_userns_clone=1 / on Ubuntu"
                " kernel.apparmor_restrict_unprivileged_userns=0)."
            )
        _tools = tools
        return tools


# --- Running -------------------------------------------------------------------------------------


class BwrapSandbox:
    level: int = 1

    def run(
        self,
        argv: list[str],
        *,
        workdir: Path,
        limits: Limits = DEFAULT_LIMITS,
        stopping: threading.Event | None = None,
        stdin: bytes = b"",
        run_id: int | None = None,
        git_writable: bool = False,
        stderr_apart: bool = False,
    ) -> Result:
        if not argv:
            raise ValueError("nothing to run: argv is empty")
        workdir = _workdir(workdir)
        uid, gid = identity(run_id)
        git_mounts = _git_mounts(workdir, writable=git_writable)
        _check_reachable(workdir, uid, gid)
        tools = _ready()
        launch = _Launch(
            argv,
            workdir,
            git_mounts,
            uid,
            gid,
            identity_name(run_id),
            limits,
            stopping,
            stdin,
            stderr_apart,
        )
        return _execute(tools, launch)


@dataclass(frozen=True)
class _Launch:
    """One command to sandbox, as `run` resolved it."""

    argv: list[str]
    workdir: Path
    git_mounts: list[str]
    uid: int
    gid: int
    user: str
    limits: Limits
    stopping: threading.Event | None = None
    stdin: bytes = b""
    stderr_apart: bool = False


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


def _execute(tools: _Tools, launch: _Launch) -> Result:
    """1. Set up the cgroup. 2. Start the command behind a gate (a shell waiting for a line on its
    stdin), as the sandbox identity. 3. Move the gate into the cgroup, then open it: nothing the
    command starts is ever outside. 4. Supervise it until its whole tree is gone. 5. Remove the
    cgroup."""
    limits = launch.limits
    group = cgroups.create(cgroups.Caps(limits.memory_bytes, limits.processes, limits.cpus))
    try:
        with _memfds() as fds:
            command = _command(tools, launch, fds, per_sandbox=group is not None)
            info_read, info_write = os.pipe()
            fds += [info_read, info_write]
            command += ["--info-fd", str(info_write), "--", *launch.argv]
            if group is not None:
                # `read` takes one byte at a time from a pipe: the gate's line never reaches the
                # command. Without it (EOF: we died before opening) the command never runs.
                command = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "agentos-gate", *command]
            # Never root: bwrap started by root keeps root's power over root-owned files.
            drop: dict[str, Any] = {}
            if os.geteuid() == 0:
                drop = {"user": launch.uid, "group": launch.gid, "extra_groups": []}
            started = time.monotonic()
            # --die-with-parent fires when this thread ends; run() blocks it until the sandbox is
            # gone.
            process = subprocess.Popen(  # noqa: S603 (argv is the sandboxed command, by design)
                command,
                stdin=subprocess.PIPE if launch.stdin or group else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if launch.stderr_apart else subprocess.STDOUT,
                # Nothing of ours reaches bwrap's own processes (its pid 1 keeps its environment).
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                cwd="/",
                pass_fds=[fd for fd in fds if fd != info_read],
                start_new_session=True,
                **drop,
            )
            fds.remove(info_write)
            os.close(info_write)
            if group is not None:
                _open_gate(process, group, keep_stdin=bool(launch.stdin))
            watch = Watch(
                wall_seconds=limits.wall_seconds,
                output_bytes=limits.output_bytes,
                stopping=launch.stopping,
                stdin=launch.stdin,
                workspace=launch.workdir,
                disk_bytes=limits.disk_bytes,
            )
            supervisor = Supervisor(process, info_read, watch, started)
            try:
                outcome = supervisor.run()
            finally:
                supervisor.close()
        oom = group.oom_kills() if group is not None else 0
    finally:
        if group is not None:
            group.remove()
    return Result(
        exit_code=outcome.code,
        output=outcome.output.decode("utf-8", errors="replace"),
        truncated_bytes=outcome.dropped,
        timed_out=outcome.timed_out,
        cancelled=outcome.cancelled,
        duration_ms=outcome.duration_ms,
        errors=outcome.errors.decode("utf-8", errors="replace"),
        killed=outcome.killed,
        out_of_memory=oom,
        memory_limit=limits.memory_bytes,
    )


def _open_gate(process: subprocess.Popen[bytes], group: cgroups.Group, *, keep_stdin: bool) -> None:
    if process.stdin is None:
        raise ValueError("the gate needs the process's stdin")
    try:
        group.add(process.pid)
        process.stdin.write(b"go\n")
        process.stdin.flush()
    except (cgroups.CgroupError, OSError) as error:
        process.kill()
        process.wait()
        raise SandboxUnavailable(f"cannot put the sandbox in its cgroup: {error}") from error
    if not keep_stdin:
        process.stdin.close()


def _command(tools: _Tools, launch: _Launch, fds: list[int], *, per_sandbox: bool) -> list[str]:
    """prlimit then bwrap, up to (not including) the info fd and the command."""
    limits = launch.limits
    address_space = limits.address_space_bytes
    if address_space is None and not per_sandbox:
        address_space = limits.memory_bytes
    command = [tools.prlimit]
    if not per_sandbox:
        # Per uid: with a uid per run, per run; the cgroup's pids.max replaces it when there is one
        # (runs without an id share the named user, and one must not starve the others).
        command.append(f"--nproc={limits.processes}")
    if address_space is not None:
        command.append(f"--as={address_space}")
    command += [
        f"--fsize={limits.file_bytes}",
        # SIGXCPU at the limit (a chance to say so), SIGKILL a second later.
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        "--core=0",
        "--",
        tools.bwrap,
        "--unshare-all",
        "--unshare-user",  # explicit: --unshare-all only tries, and --disable-userns needs it
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *("--setenv", "PATH", SANDBOX_PATH),
        *("--setenv", "HOME", SANDBOX_TMP),
        *("--setenv", "LANG", "C.UTF-8"),
        *_system_mounts(),
    ]
    for dest, content in _account_files(launch.uid, launch.gid, launch.user).items():
        command += ["--perms", "0644", "--ro-bind-data", _memfd(fds, content), dest]
    # Every writable tmpfs has a size (RAM the memory cgroup charges, but a size says ENOSPC
    # before the OOM killer picks a victim). /dev itself is read-only after bwrap filled it: its
    # device nodes still work (/dev/null takes writes), new files cannot be stored there.
    size = ["--size", str(limits.tmp_bytes)] if tools.tmpfs_size else []
    command += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", SANDBOX_SHM]
    command += ["--remount-ro", "/dev", *size, "--tmpfs", SANDBOX_TMP]
    command += ["--bind", str(launch.workdir), WORKSPACE, *launch.git_mounts]
    command += ["--chdir", WORKSPACE]
    # The root itself is a tmpfs bwrap built: nothing outside the binds is writable.
    command += ["--remount-ro", "/"]
    if tools.disable_userns:
        command.append("--disable-userns")
    command += ["--seccomp", _memfd(fds, tools.seccomp)]
    return command
