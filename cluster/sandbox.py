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

Callers (the shell tool, `manage.py sandbox_exec`) use `for_level`, `identity`, `give` and
`prepare_parent`; the other names are internal.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import pwd
import selectors
import shutil
import signal
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

from django.conf import settings

DEFAULT_USER = "agentos-sandbox"
# Per-run uids (and gids) start here: far above any uid a distribution or a directory service
# allocates (useradd stops at 60000, systemd's dynamic and container ranges end below 2**31).
UID_BASE = 2_000_000_000
# The highest uid used is 2**32 - 3: (uid_t)-1 means "no change" to chown/setresuid and -2 is the
# overflow id of NFS and old kernels.
MAX_RUN_ID = 2**32 - 3 - UID_BASE
NO_LOGIN = ("--shell", "/usr/sbin/nologin")
USERADD_LOCKED = 10  # useradd's exit status when /etc/passwd is locked by another writer
USER_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
WORKSPACE = "/workspace"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_TMP = "/tmp"  # noqa: S108 (a private tmpfs inside the sandbox, not the host's /tmp)
# How often the output loop looks at `stopping` and the wall clock.
POLL_SECONDS = 0.05
# After a kill, how long to wait for the pipe to close and the pid namespace to be gone.
TEARDOWN_SECONDS = 5.0
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


class SandboxUnavailable(RuntimeError):
    """This node cannot run the sandbox; the message says what is missing and how to fix it."""


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 300
    cpu_seconds: int = 300
    processes: int = 256  # RLIMIT_NPROC for the sandbox uid (host-wide, see the module docstring)
    memory_bytes: int = 4 << 30  # RLIMIT_AS
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE
    output_bytes: int = 200_000  # stdout+stderr kept; the rest counted and dropped


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

    def summary(self) -> str:
        """The output, then what happened, as one text for the model."""
        text = ""
        for part in (self.output, self.errors):
            text += part
            if part and not part.endswith("\n"):
                text += "\n"
        if self.truncated_bytes:
            text += f"[output truncated: {self.truncated_bytes} bytes dropped]\n"
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


# --- The sandbox identity -------------------------------------------------------------------------

_identities: dict[str, tuple[int, int]] = {}
_identity_lock = threading.Lock()


def sandbox_user() -> str:
    configured = getattr(settings, "AGENTOS_SANDBOX_USER", None) if settings.configured else None
    return str(configured or os.environ.get("AGENTOS_SANDBOX_USER") or DEFAULT_USER)


def identity(run_id: int | None = None) -> tuple[int, int]:
    """(uid, gid) that commands of `run_id` run as. When we are root: `UID_BASE + run_id` for a
    run, the named sandbox user (created if missing) without one. As an ordinary user: our own ids
    (bwrap as an ordinary user is already a sandbox, but runs are not apart from each other)."""
    if run_id is not None and not 0 <= run_id <= MAX_RUN_ID:
        raise ValueError(f"run id {run_id} is out of the sandbox uid range (0 to {MAX_RUN_ID})")
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    if run_id is not None:
        return _run_identity(run_id)
    name = sandbox_user()
    with _identity_lock:
        if name not in _identities:
            _identities[name] = _ensure_user(name)
        return _identities[name]


def _run_identity(run_id: int) -> tuple[int, int]:
    uid = UID_BASE + run_id
    # A host account on our range would share its files and processes with the run.
    for kind, lookup in (("user", pwd.getpwuid), ("group", grp.getgrgid)):
        try:
            taken = lookup(uid)[0]
        except KeyError:
            continue
        raise SandboxUnavailable(
            f"the sandbox uid {uid} of run {run_id} belongs to the host {kind} {taken!r}: per-run"
            f" ids start at {UID_BASE}; move that account out of the range"
        )
    return uid, uid


def identity_name(run_id: int | None = None) -> str:
    """The user name the sandbox's synthetic passwd shows for `identity(run_id)`."""
    uid = identity(run_id)[0]
    if run_id is not None and uid == UID_BASE + run_id:
        return f"agentos-run-{run_id}"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return DEFAULT_USER


def _ensure_user(name: str) -> tuple[int, int]:
    entry = _lookup_user(name)
    if entry is not None:
        return entry
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    if not Path(useradd).exists():
        raise SandboxUnavailable(
            f"the sandbox user {name!r} does not exist and useradd is missing: create it"
            " (a system user with no home and no login shell) or apt-get install passwd"
        )
    # useradd checks that the name is free before it locks /etc/passwd, so two racing calls
    # both add it (two entries, two uids). Our own lock makes the check-then-add one step.
    with _user_lock():
        entry = _lookup_user(name)
        if entry is not None:
            return entry
        for attempt in range(5):
            done = subprocess.run(  # noqa: S603 (a fixed program and a name from our settings)
                [useradd, "--system", "--no-create-home", "--user-group", *NO_LOGIN, name],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != USERADD_LOCKED:
                break
            time.sleep(0.1 * (attempt + 1))  # someone else (not us) is editing /etc/passwd
        entry = _lookup_user(name)
    if entry is None:
        raise SandboxUnavailable(
            f"could not create the sandbox user {name!r}: useradd exited"
            f" {done.returncode}: {done.stderr.strip()}"
        )
    return entry


def _lookup_user(name: str) -> tuple[int, int] | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise SandboxUnavailable(
            f"the sandbox user {name!r} is root or in group root; set AGENTOS_SANDBOX_USER to a"
            " dedicated unprivileged user"
        )
    return entry.pw_uid, entry.pw_gid


@contextlib.contextmanager
def _user_lock() -> Iterator[None]:
    """An exclusive lock between our processes, in a directory only root can write."""
    directory = Path("/run") if Path("/run").is_dir() else Path("/var/lock")
    fd = os.open(directory / "agentos-sandbox-user.lock", USER_LOCK_FLAGS, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def give(path: Path, run_id: int | None = None) -> None:
    """Make a directory tree the sandbox identity's own (`run_id`'s, when root; a no-op
    otherwise). Symlinks are changed themselves, never followed."""
    if os.geteuid() != 0:
        return
    uid, gid = identity(run_id)
    os.chown(path, uid, gid, follow_symlinks=False)
    if path.is_symlink() or not path.is_dir():
        return
    # fwalk works on directory fds: a directory swapped for a symlink mid-walk is not followed.
    for _dir, dirnames, filenames, dirfd in os.fwalk(path):
        for name in (*dirnames, *filenames):
            os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)


def prepare_parent(path: Path) -> None:
    """Let the sandbox identity traverse to `path`: add o+x (search, not listing) to `path` and its
    ancestors that this process owns, up to but not including /. Callers use it on the data dir
    that holds the worktrees; a directory owned by someone else is left for its owner to fix."""
    path = path.resolve()
    for directory in (path, *path.parents):
        if directory == directory.parent:
            break
        info = directory.stat()
        if info.st_uid == os.geteuid() and not info.st_mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(info.st_mode) | stat.S_IXOTH)


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
                f" worktrees under a directory it can traverse (chmod o+x {directory}, or"
                " cluster.sandbox.prepare_parent())."
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
    recursion, a fixed author, no signing."""
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
    }


# --- Readiness -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tools:
    bwrap: str
    prlimit: str
    seccomp: bytes
    disable_userns: bool


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
        tools = _Tools(bwrap, prlimit, bpf, "--disable-userns" in usage)
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
    limits, uid, gid = launch.limits, launch.uid, launch.gid
    with _memfds() as fds:
        command = [
            tools.prlimit,
            f"--nproc={limits.processes}",
            f"--as={limits.memory_bytes}",
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
        for dest, content in _account_files(uid, gid, launch.user).items():
            command += ["--perms", "0644", "--ro-bind-data", _memfd(fds, content), dest]
        command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP]
        command += ["--bind", str(launch.workdir), WORKSPACE, *launch.git_mounts]
        command += ["--chdir", WORKSPACE]
        # The root itself is a tmpfs bwrap built: nothing outside the binds is writable.
        command += ["--remount-ro", "/"]
        if tools.disable_userns:
            command.append("--disable-userns")
        info_read, info_write = os.pipe()
        fds += [info_read, info_write]
        command += ["--seccomp", _memfd(fds, tools.seccomp), "--info-fd", str(info_write)]
        command += ["--", *launch.argv]
        # Never root: bwrap started by root keeps root's power over root-owned files.
        drop: dict[str, Any] = {}
        if os.geteuid() == 0:
            drop = {"user": uid, "group": gid, "extra_groups": []}
        started = time.monotonic()
        # --die-with-parent fires when this thread ends; run() blocks it until the sandbox is gone.
        process = subprocess.Popen(  # noqa: S603 (argv is the sandboxed command, by design)
            command,
            stdin=subprocess.PIPE if launch.stdin else subprocess.DEVNULL,
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
        supervisor = _Supervisor(process, info_read, launch, started)
        try:
            return supervisor.run()
        finally:
            supervisor.close()


class _Supervisor:
    """Pumps stdin and the output of one sandboxed command and decides when to kill it.

    The command's stdout and stderr share one pipe, or have one each (`stderr_apart`). The first
    `output_bytes` of each are kept, the rest counted and read on so the command never blocks on a
    full pipe. bwrap's `--info-fd` names its
    pid 1 (host pid); a pidfd on it tells when the pid namespace, hence every process the command
    started, is gone: `run` returns only then.
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        info_fd: int,
        launch: _Launch,
        started: float,
    ) -> None:
        if process.stdout is None:
            raise ValueError("the process must have been started with stdout=PIPE")
        self.process = process
        self.limits = limits = launch.limits
        self.stopping = launch.stopping
        self.started = started
        self.deadline = started + limits.wall_seconds
        self.kept = {"out": bytearray(), "err": bytearray()}
        self.dropped = 0
        self.info = bytearray()
        self.pidfd: int | None = None
        self.killed_at: float | None = None
        self.timed_out = False
        self.cancelled = False
        self.pending = memoryview(launch.stdin)
        self.selector = selectors.DefaultSelector()
        self.outputs = {process.stdout.fileno()}
        readers = [(process.stdout.fileno(), "out"), (info_fd, "info")]
        if process.stderr is not None:
            self.outputs.add(process.stderr.fileno())
            readers.append((process.stderr.fileno(), "err"))
        for fd, role in readers:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, role)
        if launch.stdin and process.stdin is not None:
            os.set_blocking(process.stdin.fileno(), False)
            self.selector.register(process.stdin.fileno(), selectors.EVENT_WRITE, "in")

    def run(self) -> Result:
        while self.output_open() or self.process.poll() is None:
            self.check_stop()
            if self.killed_at is not None and time.monotonic() - self.killed_at > TEARDOWN_SECONDS:
                break  # a process outside the namespace holds the pipe: stop waiting for it
            wait = POLL_SECONDS
            if self.killed_at is None:
                wait = max(min(wait, self.deadline - time.monotonic()), 0)
            if self.output_open():
                self.pump(wait)
            else:
                # The command closed its output but runs on.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(wait)
        if self.process.poll() is None:
            self.kill()
        self.process.wait()
        if self.pidfd is not None:
            # bwrap's pid 1 exits only once the kernel has killed the rest of its namespace.
            with selectors.DefaultSelector() as waiting:
                waiting.register(self.pidfd, selectors.EVENT_READ)
                waiting.select(TEARDOWN_SECONDS)
        code = self.process.returncode
        return Result(
            exit_code=None if self.killed_at is not None else (code if code >= 0 else 128 - code),
            output=self.kept["out"].decode("utf-8", errors="replace"),
            truncated_bytes=self.dropped,
            timed_out=self.timed_out,
            cancelled=self.cancelled,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            errors=self.kept["err"].decode("utf-8", errors="replace"),
        )

    def output_open(self) -> bool:
        return any(fd in self.selector.get_map() for fd in self.outputs)

    def check_stop(self) -> None:
        if self.killed_at is not None:
            return
        if self.stopping is not None and self.stopping.is_set():
            self.cancelled = True
        elif time.monotonic() >= self.deadline:
            self.timed_out = True
        else:
            return
        self.killed_at = time.monotonic()
        self.kill()

    def kill(self) -> None:
        # The process group holds prlimit-turned-bwrap and bwrap's pid 1; the pidfd reaches pid 1
        # even if it left the group. Killing pid 1 takes down its whole pid namespace.
        if self.process.returncode is None:  # not reaped yet, so the group id is still ours
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def pump(self, wait: float) -> None:
        for key, _events in self.selector.select(wait):
            if key.data == "in":
                self.feed(key.fd)
                continue
            try:
                chunk = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                self.selector.unregister(key.fd)
            elif key.data == "info":
                self.note_info(key.fd, chunk)
            else:
                kept = self.kept[key.data]
                room = max(self.limits.output_bytes - len(kept), 0)
                kept += chunk[:room]
                self.dropped += max(len(chunk) - room, 0)

    def feed(self, fd: int) -> None:
        try:
            written = os.write(fd, self.pending[: 1 << 16])
            self.pending = self.pending[written:]
        except BlockingIOError:
            return
        except BrokenPipeError:
            self.pending = self.pending[:0]
        if not self.pending:
            self.selector.unregister(fd)
            if self.process.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    self.process.stdin.close()

    def note_info(self, fd: int, chunk: bytes) -> None:
        self.info += chunk
        try:
            child_pid = int(json.loads(self.info)["child-pid"])
        except ValueError:
            return  # not all of it yet
        except (KeyError, TypeError):
            child_pid = 0
        self.selector.unregister(fd)
        if child_pid > 0:
            with contextlib.suppress(ProcessLookupError):
                self.pidfd = os.pidfd_open(child_pid)
        if self.killed_at is not None:
            self.kill()

    def close(self) -> None:
        self.selector.close()  # the info pipe is closed with the other descriptors of the run
        if self.process.poll() is None:
            self.kill()
            self.process.wait()
        for stream in (self.process.stdout, self.process.stderr, self.process.stdin):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
