"""Sandboxes that run an agent's shell commands in a worktree.

Level 1 is bubblewrap, started as a dedicated non-root uid: bwrap run by root keeps root's power
over root-owned files, so it never is. The sandbox sees only what is mounted: /usr and a few /etc
files read-only, a synthetic passwd/group, private /proc, /dev and /tmp, the worktree read-write at
/workspace with its git metadata read-only, and no network but loopback. A seccomp filter
(`cluster.seccomp`) refuses namespaces, mounts, ptrace and the like; rlimits set by util-linux
`prlimit` bound processes, memory, file size and CPU; a wall clock and the caller's `stopping`
event kill the whole tree.

This module decides what a sandbox is (a declarative profile: argv, worktree, identity, limits,
the seccomp program) from what needs Django or libseccomp; a node's runner (`cluster.runner`,
reached through `cluster.dispatch`) builds and supervises the sandbox itself.

Each run has its own uid when we are root (`identity(run_id)`: `UID_BASE + run_id`, no passwd
entry needed), so no run can signal, trace or read another's processes or files, and per-uid limits
(RLIMIT_NPROC) are per run. Commands without a run (the readiness check, `manage.py sandbox_exec`)
run as the named user `agentos-sandbox`. As an ordinary user everything runs as our own uid: per-run
uids need root.

Callers (the tools, `manage.py sandbox_exec`) use `for_level`, `identity` and `give` (both from
`cluster.identity`, re-exported); the other names are internal.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cluster import dispatch, environments, warm
from cluster.dispatch import StepRef as StepRef
from cluster.environments import Environment as Environment

# Re-exported (the `as` form): callers import the sandbox's whole surface from here.
from cluster.identity import BUILD_USER as BUILD_USER
from cluster.identity import DEFAULT_USER as DEFAULT_USER
from cluster.identity import MAX_RUN_ID as MAX_RUN_ID
from cluster.identity import UID_BASE as UID_BASE
from cluster.identity import SandboxUnavailable as SandboxUnavailable
from cluster.identity import builder as builder
from cluster.identity import give as give
from cluster.identity import identity as identity
from cluster.identity import identity_name as identity_name
from cluster.identity import sandbox_user as sandbox_user
from cluster.runner import cgroups
from cluster.runner.bwrap import RESERVED as RESERVED
from cluster.runner.bwrap import SANDBOX_PATH as SANDBOX_PATH
from cluster.runner.bwrap import WORKSPACE as WORKSPACE
from cluster.runner.protocol import INVALID_PARAMS, RpcError

if TYPE_CHECKING:
    from cluster.egress import Attachment as Egress


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
    With `egress` (`cluster.egress.attach`) the command reaches out through the run's egress
    socket: http_proxy points at the forwarder inside, which relays to it; without, no network.
    With `step` the run belongs to that journaled step: the node fences it and keeps its result
    under the step's key, and a second call with that key answers the first result.
    With `environment` (`cluster.environments`) the project's frozen environment is read-only at
    /env (/env/bin first on PATH), built first on the chosen node if it lacks that version: in
    its own clean checkout, as the build user, without network (never in `workdir`, as the run).
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
        step: StepRef | None = None,
        egress: Egress | None = None,
        environment: Environment | None = None,
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
    if level == 2 and importlib.util.find_spec("cluster.runner.vm") is not None:
        return NodeSandbox(2)
    if level in (2, 3):
        raise SandboxUnavailable(f"sandbox level {level} (a disposable VM) is not available yet")
    raise SandboxUnavailable(f"unknown sandbox level {level}: levels are 0 to 3")


def limits_mode() -> cgroups.Mode:
    """How `Limits` are enforced on this node: per sandbox (a cgroup each) or, degraded, per
    process and per uid (rlimits only). For the console and the health page."""
    return cgroups.mode()


# --- Readiness -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tools:
    """What the control plane adds to every level-1 profile: the compiled seccomp program."""

    seccomp: bytes


_tools: _Tools | None = None
_tools_lock = threading.Lock()


def _ready() -> _Tools:
    """Build the seccomp filter, then run `true` in a sandbox once per process."""
    global _tools
    with _tools_lock:
        if _tools is not None:
            return _tools
        try:
            # Imported here: importing it loads libseccomp, which may be missing.
            from cluster import seccomp

            bpf = seccomp.bpf()
        except (ImportError, RuntimeError, OSError) as error:
            raise SandboxUnavailable(
                f"cannot build the seccomp filter ({error}): apt-get install libseccomp2, and"
                " pip install pyseccomp (it is in requirements.lock)"
            ) from error
        tools = _Tools(bpf)
        uid = identity()[0]
        with tempfile.TemporaryDirectory(prefix="agentos-sandbox-check-", dir="/tmp") as scratch:
            give(Path(scratch))
            trial = _execute(profile(1, ["true"], Path(scratch), Limits(30), tools), None, None)
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


class NodeSandbox:
    """A sandbox of `level` on the node `cluster.dispatch` picks."""

    def __init__(self, level: int) -> None:
        self.level = level

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
        step: StepRef | None = None,
        egress: Egress | None = None,
        environment: Environment | None = None,
    ) -> Result:
        if not argv:
            raise ValueError("nothing to run: argv is empty")
        tools = _ready() if self.level == 1 else None
        built = profile(
            self.level,
            argv,
            workdir,
            limits,
            tools,
            run_id=run_id,
            git_writable=git_writable,
            stdin=stdin,
            stderr_apart=stderr_apart,
            egress=egress,
        )
        setup = None
        if environment is not None:
            built["environment"] = {"name": environment.name, "version": environment.version}
            setup = _setup(environment)
        return _execute(built, step, stopping, setup)


def _setup(environment: Environment) -> dispatch.Setup:
    """What a node lacking `environment` builds it from: its setup commands at level 1 (whatever
    the command's level: the node freezes what it made), in its clean checkout, as the build
    user, without network (no egress: a build belongs to no run)."""
    tools = _ready()

    def setup_profile(workdir: Path) -> dict[str, Any]:
        return profile(
            1,
            ["/bin/sh", "-c", environment.setup],
            workdir,
            Limits(wall_seconds=environments.SETUP_SECONDS),
            tools,
            build=True,
        )

    return dispatch.Setup(
        environment.name,
        environment.version,
        setup_profile,
        environment.checkout or _empty_directory,
    )


@contextlib.contextmanager
def _empty_directory() -> Iterator[Path]:
    """Where a project without repository builds: an empty directory of the build user."""
    with tempfile.TemporaryDirectory(prefix="agentos-env-", dir="/tmp") as scratch:
        give(Path(scratch), build=True)
        yield Path(scratch)


def build_environment(environment: Environment, *, stopping: threading.Event | None = None) -> None:
    """Build `environment` on the local node now, unless it is there already (the owner's
    rebuild). Raises `SandboxUnavailable` with the node's words when the build fails."""
    try:
        dispatch.execute_build(_setup(environment), stopping=stopping)
    except RpcError as error:
        raise SandboxUnavailable(error.message) from None


def run_as_builder(
    argv: list[str], *, workdir: Path, limits: Limits = DEFAULT_LIMITS, git_writable: bool = False
) -> Result:
    """One command at level 1 on the local node as the build user (a clean checkout's own
    `git reset`, inside the sandbox like a run's)."""
    return _execute(
        profile(1, argv, workdir, limits, _ready(), git_writable=git_writable, build=True),
        None,
        None,
    )


class BwrapSandbox(NodeSandbox):
    """Level 1: bubblewrap on the node."""

    level: int = 1

    def __init__(self) -> None:
        super().__init__(1)


def profile(
    level: int,
    argv: list[str],
    workdir: Path | None,
    limits: Limits,
    tools: _Tools | None,
    *,
    run_id: int | None = None,
    git_writable: bool = False,
    stdin: bytes = b"",
    stderr_apart: bool = False,
    egress: Egress | None = None,
    build: bool = False,
) -> dict[str, Any]:
    """The runner profile of one command (docs/cluster.md): the identity (the run's, or the
    build user's with `build`), the limits and the seccomp program are decided here, on the
    control plane; the node checks and enforces them."""
    uid, gid = builder() if build else identity(run_id)
    return {
        "level": level,
        "argv": list(argv),
        "workdir": None if workdir is None else str(workdir),
        "writable": git_writable,
        "uid": uid,
        "gid": gid,
        "user": BUILD_USER if build else identity_name(run_id),
        "limits": asdict(limits),
        "seccomp": None if tools is None else base64.b64encode(tools.seccomp).decode(),
        # Egress (cluster.egress.attach): the proxy variables with the run's token, the one
        # credential-like value a sandbox holds; never a secret.
        "env": dict(egress.env) if egress else {},
        "stdin": base64.b64encode(stdin).decode() if stdin else None,
        "stderr_apart": stderr_apart,
        "egress_socket": str(egress.socket) if egress else None,
        "environment": None,
        # A run's level-2 commands share one warm VM per node (`cluster.warm`).
        "warm": warm.key(run_id) if level == 2 and run_id is not None and not build else None,
    }


def _execute(
    built: dict[str, Any],
    step: StepRef | None,
    stopping: threading.Event | None,
    environment: dispatch.Setup | None = None,
) -> Result:
    limits = built["limits"]
    needs = dispatch.Needs(built["level"], limits["memory_bytes"], limits["disk_bytes"])
    try:
        answer = dispatch.execute(
            built, step=step, needs=needs, stopping=stopping, environment=environment
        )
    except RpcError as error:
        if error.code == INVALID_PARAMS and not error.message.startswith("the setup command"):
            # The node's words name the field: "profile.workdir: the workdir ... is not a
            # directory"; callers know the field by its parameter.
            raise ValueError(error.message.removeprefix("profile.workdir: ")) from None
        raise SandboxUnavailable(error.message) from None
    return result(answer)


def result(answer: dict[str, Any]) -> Result:
    """A runner's `run` result as the tools read it."""
    killed = answer.get("killed")
    return Result(
        exit_code=answer["exit_code"],
        output=answer["output"],
        truncated_bytes=answer.get("truncated_bytes", 0),
        timed_out=killed == "timeout",
        cancelled=killed in ("cancelled", "stopped"),
        duration_ms=answer.get("duration_ms", int(answer.get("seconds", 0) * 1000)),
        errors=answer.get("errors", ""),
        # Another reason ("disk", or a level's own): its words, else its name.
        killed=""
        if killed in (None, "timeout", "cancelled", "stopped")
        else str(answer.get("reason") or killed),
        out_of_memory=answer.get("out_of_memory", 0),
        memory_limit=answer.get("memory_limit", 0),
    )
