"""Sandboxes that run an agent's shell commands in a worktree.

Level 1 is bubblewrap (`BwrapSandbox`), started as a dedicated non-root uid: bwrap run by root
keeps root's power over root-owned files, so it never is. The sandbox sees only what is mounted:
/usr and a few /etc files read-only, a synthetic passwd/group, private /proc, /dev and /tmp, the
worktree read-write at /workspace with its git metadata read-only, and no network but loopback.
A seccomp filter (`cluster.seccomp`) refuses namespaces, mounts, ptrace and the like; rlimits set by
util-linux `prlimit` bound processes, memory, file size and CPU; a wall clock and the caller's
`stopping` event kill the whole tree.

Shared by every run on a node: the sandbox uid. RLIMIT_NPROC counts that uid's processes on the
whole host (the user namespace adds a per-sandbox count but the host-level one is checked too), so
`Limits.processes` caps the sum of the concurrent level-1 runs, not each run alone.

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
    output: str  # stdout and stderr as produced, capped, decoded (utf-8, errors replaced)
    truncated_bytes: int
    timed_out: bool
    cancelled: bool
    duration_ms: int

    def summary(self) -> str:
        """The output, then what happened, as one text for the model."""
        text = self.output
        if text and not text.endswith("\n"):
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
    (an empty argv, a workdir that is not a directory).
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
    """(uid, gid) that commands of `run_id` run as: the sandbox user when we are root (created if
    missing), else our own ids (bwrap as an ordinary user is already a sandbox)."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    name = sandbox_user()
    with _identity_lock:
        if name not in _identities:
            _identities[name] = _ensure_user(name)
        return _identities[name]


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


def _git_mounts(workdir: Path) -> tuple[list[str], list[Path]]:
    """Read-only binds for the worktree's git metadata, and the host paths they need reached.
    bwrap runs as the sandbox user, so whatever a planted `.git` names can only be something that
    user could read anyway.

    `.git` as a directory (a plain clone) is re-bound read-only over itself. `.git` as a file
    (a linked worktree, "gitdir: <path>") is bound read-only, and so are the gitdir it names and
    the repository's common dir, at their host paths, so git inside finds them where the file says.
    """
    dot_git = workdir / ".git"
    try:
        info = os.lstat(dot_git)
    except FileNotFoundError:
        return [], []
    inside = f"{WORKSPACE}/.git"
    if stat.S_ISDIR(info.st_mode):
        return ["--ro-bind", str(dot_git), inside], []
    if not stat.S_ISREG(info.st_mode):
        # A symlink could point back into the writable workspace: refuse rather than guess.
        raise ValueError(f"{dot_git} is neither a directory nor a gitdir file; refusing to run")
    mounts = ["--ro-bind", str(dot_git), inside]
    fd = os.open(dot_git, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        first_line = file.read(4096).decode(errors="replace").splitlines()[:1]
    if not first_line or not first_line[0].startswith("gitdir:"):
        return mounts, []  # not a worktree git knows either: git inside will say so
    gitdir = (workdir / first_line[0].removeprefix("gitdir:").strip()).resolve()
    common = gitdir
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    for path in {gitdir, common}:
        if _reserved(path):
            raise ValueError(f"the git metadata of {workdir} is at {path}, which cannot be mounted")
    # One bind covers both when the gitdir lives in the common dir (<common>/worktrees/<name>).
    needed = [common] if gitdir.is_relative_to(common) else [common, gitdir]
    for path in needed:
        mounts += ["--ro-bind", str(path), str(path)]
    return mounts, needed


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


def _account_files(uid: int, gid: int) -> dict[str, bytes]:
    """A passwd and group naming only the sandbox identity and nobody (what unmapped ids show as),
    so tools that look the user up work without seeing the host's accounts. Also a system git
    config trusting every repository: a linked worktree's gitdir belongs to the host's user."""
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = DEFAULT_USER
    try:
        group = grp.getgrgid(gid).gr_name
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
        "/etc/gitconfig": b"[safe]\n\tdirectory = *\n",
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
            trial = _execute(tools, ["true"], Path(scratch), [], uid, gid, Limits(wall_seconds=30))
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
    ) -> Result:
        if not argv:
            raise ValueError("nothing to run: argv is empty")
        workdir = _workdir(workdir)
        uid, gid = identity(run_id)
        git_mounts, git_paths = _git_mounts(workdir)
        for path in (workdir, *git_paths):
            _check_reachable(path, uid, gid)
        tools = _ready()
        return _execute(tools, argv, workdir, git_mounts, uid, gid, limits, stopping, stdin)


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
    tools: _Tools,
    argv: list[str],
    workdir: Path,
    git_mounts: list[str],
    uid: int,
    gid: int,
    limits: Limits,
    stopping: threading.Event | None = None,
    stdin: bytes = b"",
) -> Result:
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
        for dest, content in _account_files(uid, gid).items():
            command += ["--perms", "0644", "--ro-bind-data", _memfd(fds, content), dest]
        command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP]
        command += ["--bind", str(workdir), WORKSPACE, *git_mounts, "--chdir", WORKSPACE]
        # The root itself is a tmpfs bwrap built: nothing outside the binds is writable.
        command += ["--remount-ro", "/"]
        if tools.disable_userns:
            command.append("--disable-userns")
        info_read, info_write = os.pipe()
        fds += [info_read, info_write]
        command += ["--seccomp", _memfd(fds, tools.seccomp), "--info-fd", str(info_write)]
        command += ["--", *argv]
        # Never root: bwrap started by root keeps root's power over root-owned files.
        drop: dict[str, Any] = {}
        if os.geteuid() == 0:
            drop = {"user": uid, "group": gid, "extra_groups": []}
        started = time.monotonic()
        # --die-with-parent fires when this thread ends; run() blocks it until the sandbox is gone.
        process = subprocess.Popen(  # noqa: S603 (argv is the sandboxed command, by design)
            command,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Nothing of ours reaches bwrap's own processes (its pid 1 keeps its environment).
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd="/",
            pass_fds=[fd for fd in fds if fd != info_read],
            start_new_session=True,
            **drop,
        )
        fds.remove(info_write)
        os.close(info_write)
        supervisor = _Supervisor(process, info_read, limits, stopping, stdin, started)
        try:
            return supervisor.run()
        finally:
            supervisor.close()


class _Supervisor:
    """Pumps stdin and the output of one sandboxed command and decides when to kill it.

    The command's stdout and stderr share one pipe. The first `output_bytes` are kept, the rest
    counted and read on so the command never blocks on a full pipe. bwrap's `--info-fd` names its
    pid 1 (host pid); a pidfd on it tells when the pid namespace, hence every process the command
    started, is gone: `run` returns only then.
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        info_fd: int,
        limits: Limits,
        stopping: threading.Event | None,
        stdin: bytes,
        started: float,
    ) -> None:
        if process.stdout is None:
            raise ValueError("the process must have been started with stdout=PIPE")
        self.process = process
        self.limits = limits
        self.stopping = stopping
        self.started = started
        self.deadline = started + limits.wall_seconds
        self.kept = bytearray()
        self.dropped = 0
        self.info = bytearray()
        self.pidfd: int | None = None
        self.killed_at: float | None = None
        self.timed_out = False
        self.cancelled = False
        self.pending = memoryview(stdin)
        self.selector = selectors.DefaultSelector()
        self.out_fd = process.stdout.fileno()
        for fd, role in ((self.out_fd, "out"), (info_fd, "info")):
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, role)
        if stdin and process.stdin is not None:
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
            output=self.kept.decode("utf-8", errors="replace"),
            truncated_bytes=self.dropped,
            timed_out=self.timed_out,
            cancelled=self.cancelled,
            duration_ms=int((time.monotonic() - self.started) * 1000),
        )

    def output_open(self) -> bool:
        return self.out_fd in self.selector.get_map()

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
                room = max(self.limits.output_bytes - len(self.kept), 0)
                self.kept += chunk[:room]
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
        for stream in (self.process.stdout, self.process.stdin):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
