"""A cgroup per sandbox: total memory, processes and CPU capped for the sandbox as a whole.

rlimits are per process (RLIMIT_AS) or per uid (RLIMIT_NPROC): two processes of 1 GiB each pass a
1 GiB RLIMIT_AS, and one run's fork bomb exhausted the shared uid's count for every other run. A
cgroup counts everything the sandbox started, whatever its uid.

Where: under the cgroup this process already is in (`/proc/self/cgroup`), in a child `agentos/`,
one cgroup per sandbox named `<creator pid>-<creator start time>-<n>`. Nesting keeps the sandboxes
inside whatever limits the worker itself was given (a systemd unit, a container) instead of
escaping to the root. The creator in the name lets the next start remove what a killed worker left
(`clean_stale`).

Which: cgroup v2 when the unified hierarchy offers `memory`, `pids` and `cpu` and our subtree is
delegated (we can enable them for `agentos/`; `AGENTOS_CGROUP_PARENT` names another delegated
cgroup to use); else cgroup v1 with writable `memory`, `pids` and `cpu` hierarchies (this machine);
else none: the sandbox falls back to rlimits alone (`mode()` says which and why, for the console).

`cluster.runner.bwrap` is the only caller: `create` before the sandbox starts, `Group.add` with
the gated child's pid before it may fork, `Group.remove` once the sandbox is gone.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

NEEDED = ("memory", "pids", "cpu")
DIRECTORY = "agentos"
CPU_PERIOD_US = 100_000
# After the sandbox's pid namespace is gone its cgroup may still count exiting tasks for a moment.
REMOVE_SECONDS = 2.0
PARENT_ENV = "AGENTOS_CGROUP_PARENT"


class CgroupError(RuntimeError):
    """A cgroup could not be created or joined; the message names the file."""


@dataclass(frozen=True)
class Mode:
    """How sandbox limits are enforced on this node: `cgroup-v2`, `cgroup-v1` or `rlimits`."""

    name: str
    detail: str

    @property
    def per_sandbox(self) -> bool:
        return self.name != "rlimits"


@dataclass(frozen=True)
class Caps:
    memory_bytes: int
    processes: int
    cpus: float | None  # None: no CPU quota


class Group:
    """One sandbox's cgroup: a directory per hierarchy (one in v2, one per controller in v1)."""

    def __init__(self, version: int, paths: dict[str, Path]) -> None:
        self.version = version
        self.paths = paths  # controller (or "unified") -> directory

    def add(self, pid: int) -> None:
        """Move `pid` into every hierarchy; its children are born inside."""
        for path in self.directories():
            try:
                (path / "cgroup.procs").write_text(f"{pid}\n")
            except OSError as error:
                raise CgroupError(f"cannot move pid {pid} into {path}: {error}") from error

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the memory limit."""
        if self.version == 2:
            events = self.paths["unified"] / "memory.events"
        else:
            events = self.paths["memory"] / "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def directories(self) -> list[Path]:
        return sorted(set(self.paths.values()))

    def remove(self) -> None:
        """Kill what is left inside (nothing, normally: the pid namespace is gone), then rmdir."""
        for path in self.directories():
            _remove(path)


class _Backend:
    def __init__(self, version: int, bases: dict[str, Path]) -> None:
        self.version = version
        self.bases = bases  # controller (or "unified") -> the agentos/ directory

    def create(self, caps: Caps) -> Group:
        name = f"{_creator()}-{next(_counter)}"
        paths = {key: base / name for key, base in self.bases.items()}
        group = Group(self.version, paths)
        try:
            for path in group.directories():
                path.mkdir()
            if self.version == 2:
                _limit_v2(paths["unified"], caps)
            else:
                _limit_v1(paths, caps)
        except OSError as error:
            group.remove()
            raise CgroupError(f"cannot set up the sandbox cgroup {name}: {error}") from error
        return group


def _limit_v1(paths: dict[str, Path], caps: Caps) -> None:
    memory = paths["memory"]
    (memory / "memory.limit_in_bytes").write_text(str(caps.memory_bytes))
    swap = memory / "memory.memsw.limit_in_bytes"
    if swap.exists():  # only with swap accounting; memory+swap equal to memory: no swap at all
        swap.write_text(str(caps.memory_bytes))
    (paths["pids"] / "pids.max").write_text(str(caps.processes))
    if caps.cpus is not None:
        (paths["cpu"] / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        (paths["cpu"] / "cpu.cfs_quota_us").write_text(str(_quota(caps.cpus)))


def _limit_v2(path: Path, caps: Caps) -> None:
    (path / "memory.max").write_text(str(caps.memory_bytes))
    swap = path / "memory.swap.max"
    if swap.exists():
        swap.write_text("0")
    (path / "pids.max").write_text(str(caps.processes))
    if caps.cpus is not None:
        (path / "cpu.max").write_text(f"{_quota(caps.cpus)} {CPU_PERIOD_US}")


def _quota(cpus: float) -> int:
    return max(int(cpus * CPU_PERIOD_US), 1000)  # the kernel's minimum quota is 1 ms


_counter = itertools.count(1)


def _creator() -> str:
    """This process as `<pid>-<start time in clock ticks>`: unique even after the pid is reused."""
    return f"{os.getpid()}-{_start_time(os.getpid())}"


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ")".
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(creator: str) -> bool:
    pid, _, started = creator.partition("-")
    return pid.isdigit() and _start_time(int(pid)) == started


def _remove(path: Path) -> None:
    deadline = time.monotonic() + REMOVE_SECONDS
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                raise CgroupError(f"cannot remove the cgroup {path}: {error}") from error
        for pid in _pids(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _pids(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


# --- Detection -----------------------------------------------------------------------------------

_backend: _Backend | None = None
_mode: Mode | None = None
_lock = threading.Lock()


def mode() -> Mode:
    """Which enforcement this node has (detected once per process, stale cgroups cleaned then)."""
    return _detect()[1]


def directories() -> list[Path]:
    """The `agentos/` directories the sandboxes' cgroups are made in (none without cgroups)."""
    backend = _detect()[0]
    return [] if backend is None else sorted(set(backend.bases.values()))


def create(caps: Caps) -> Group | None:
    """A new cgroup with `caps`, or None when the node has no usable cgroups (`mode()`)."""
    backend = _detect()[0]
    return None if backend is None else backend.create(caps)


def _detect() -> tuple[_Backend | None, Mode]:
    global _backend, _mode
    with _lock:
        if _mode is None:
            _backend, _mode = detect(
                Path("/proc/self/mountinfo").read_text(),
                Path("/proc/self/cgroup").read_text(),
                os.environ.get(PARENT_ENV),
            )
            if _backend is not None:
                clean_stale(_backend.bases.values())
        return _backend, _mode


def detect(
    mountinfo: str, self_cgroup: str, parent: str | None = None
) -> tuple[_Backend | None, Mode]:
    """Pick v2, then v1, then rlimits, from the texts of /proc/self/mountinfo and
    /proc/self/cgroup (parameters so tests can describe other hosts)."""
    mounts = _cgroup_mounts(mountinfo)
    own = _own_cgroups(self_cgroup)
    reasons = []
    if "unified" in mounts:
        try:
            return _setup_v2(mounts["unified"], own.get("unified"), parent)
        except (CgroupError, OSError) as error:
            reasons.append(f"v2: {error}")
    else:
        reasons.append("v2: no cgroup2 mount")
    try:
        return _setup_v1(mounts, own)
    except (CgroupError, OSError) as error:
        reasons.append(f"v1: {error}")
    return None, Mode(
        "rlimits",
        "no usable cgroup (" + "; ".join(reasons) + "): memory is capped per process"
        " (RLIMIT_AS), processes per uid (RLIMIT_NPROC: per run only when runs have their own"
        " uid, i.e. as root), CPU time per process, and CPU share not at all",
    )


def _cgroup_mounts(mountinfo: str) -> dict[str, tuple[Path, str]]:
    """controller (or "unified") -> (mount point, root of the mount within the hierarchy)."""
    found: dict[str, tuple[Path, str]] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        point = Path(fields[4].replace("\\040", " "))
        if fstype == "cgroup2":
            found.setdefault("unified", (point, fields[3]))
        elif fstype == "cgroup":
            for controller in options:
                if controller in NEEDED:
                    found.setdefault(controller, (point, fields[3]))
    return found


def _own_cgroups(self_cgroup: str) -> dict[str, str]:
    own: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        _id, controllers, path = line.split(":", 2)
        if not controllers:
            own["unified"] = path
        for controller in controllers.split(","):
            if controller:
                own[controller] = path
    return own


def _directory(mount: tuple[Path, str], own: str | None) -> Path:
    point, root = mount
    own = own or "/"
    if root != "/" and own.startswith(root):
        own = own[len(root) :]
    return point / own.lstrip("/")


def _setup_v2(
    mount: tuple[Path, str], own: str | None, parent_override: str | None
) -> tuple[_Backend, Mode]:
    parent = Path(parent_override) if parent_override else _directory(mount, own)
    available = (parent / "cgroup.controllers").read_text().split()
    missing = [name for name in NEEDED if name not in available]
    if missing:
        raise CgroupError(f"{parent} does not offer {', '.join(missing)}")
    base = parent / DIRECTORY
    base.mkdir(exist_ok=True)
    wanted = " ".join(f"+{name}" for name in NEEDED)
    for directory in (parent, base):
        enabled = (directory / "cgroup.subtree_control").read_text().split()
        if all(name in enabled for name in NEEDED):
            continue
        try:
            (directory / "cgroup.subtree_control").write_text(wanted)
        except OSError as error:
            # EBUSY: the parent holds processes (ours), so it is not delegated to us.
            raise CgroupError(
                f"cannot enable {wanted} in {directory} ({error}); delegate a cgroup subtree"
                f" and name it in {PARENT_ENV}"
            ) from error
    return _Backend(2, {"unified": base}), Mode("cgroup-v2", f"one cgroup v2 per sandbox in {base}")


def _setup_v1(mounts: dict[str, tuple[Path, str]], own: dict[str, str]) -> tuple[_Backend, Mode]:
    missing = [name for name in NEEDED if name not in mounts]
    if missing:
        raise CgroupError(f"no {', '.join(missing)} hierarchy mounted")
    bases = {}
    for name in NEEDED:
        base = _directory(mounts[name], own.get(name)) / DIRECTORY
        try:
            base.mkdir(exist_ok=True)
        except OSError as error:
            raise CgroupError(f"cannot create {base}: {error}") from error
        if not os.access(base / "cgroup.procs", os.W_OK):
            raise CgroupError(f"{base} is not writable")
        bases[name] = base
    shown = ", ".join(str(base) for base in bases.values())
    return _Backend(1, bases), Mode("cgroup-v1", f"one cgroup v1 per sandbox in {shown}")


def clean_stale(bases: Iterable[Path]) -> list[Path]:
    """Remove the cgroups whose creator is gone (a worker killed with -9), killing what is left
    in them. A live creator's cgroups are left alone, even empty: it may be about to use them."""
    removed = []
    for base in bases:
        with contextlib.suppress(FileNotFoundError):
            for path in base.iterdir():
                creator = path.name.rsplit("-", 1)[0]
                if path.is_dir() and not _alive(creator):
                    with contextlib.suppress(CgroupError):
                        _remove(path)
                        removed.append(path)
    return removed


def kill(paths: Iterable[Path]) -> None:
    """SIGKILL every process in these sandbox cgroups: another runner process's kill switch.
    Only directories under our own `agentos/` bases are touched."""
    bases = directories()
    for path in paths:
        if any(path.parent == base for base in bases):
            for pid in _pids(path):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
