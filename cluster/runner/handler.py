"""The runner's request handler: one object per node state directory, used by the stdio server
(`cluster.runner.server`, a process per SSH connection) and in-process by the control plane for
its own node `local`. Same files, same fencing, either way.

State directory (`--state`):
- `fences/<step_id>.json`: the highest fence accepted for the step, fsynced before it runs.
- `results/<sha256(key)>.json`: a step's result, written (tmp + fsync + rename) BEFORE the answer;
  a later `run` with that key answers it (`replayed: true`) and runs nothing.
- `active/<id>.json`: each live sandbox, with the runner process that owns it and the sandbox's
  process group and cgroups, so that any runner process of the node can kill it (`cancel`,
  `stop_all`); `active/<id>.cancel` tells the owner why it was killed.
- `environments/<name>/<version>/` (frozen, read-only) and `<version>.json` (its digest, written
  last: an environment without it is incomplete and built again).
- `locks/`: flock files between the node's runner processes.
- `trees/<name>/copy`: the node's copy of a worktree the control plane ships (`treesync`), and
  `results/<sha256(key)>.tree/`: the contents a step changed in it, kept with its result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import shutil
import signal
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.runner import bwrap, cgroups, deploy, files, level2, treesync
from cluster.runner.protocol import NAME as NAME_PATTERN
from cluster.runner.protocol import (
    PROTOCOL,
    STALE_FENCE,
    Profile,
    RpcError,
    invalid,
    parse_profile,
    step_id,
    text,
    unavailable,
)
from cluster.runner.protocol import fence as parse_fence

# Test hook: die (SIGKILL) right after the result file is written, before answering.
DIE_AFTER_RESULT_ENV = "AGENTOS_RUNNER_TEST_DIE_AFTER_RESULT"
CANCEL_POLL_SECONDS = 0.1
SETUP_OUTPUT_SHOWN = 2000  # characters of a failed setup command's output in the error


@dataclass
class _Live:
    stop: threading.Event
    reason: list[str] = field(default_factory=list)


class Handler:
    """`call(method, params)` answers one request or raises `RpcError`."""

    def __init__(self, state: Path, node: str = "local", root: Path | None = None) -> None:
        self.state = state
        self.node = node
        self.root = root
        self.version = deploy.running_version()
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._anonymous = itertools.count(1)
        for name, mode in (
            ("", 0o711),  # the environments below must be reachable by sandbox uids
            ("fences", 0o700),
            ("results", 0o700),
            ("active", 0o700),
            ("locks", 0o700),
            ("environments", 0o711),
        ):
            path = state / name
            path.mkdir(mode=mode, parents=True, exist_ok=True)
            if os.geteuid() == 0 and path.stat().st_uid != 0:
                raise RuntimeError(f"the runner state directory {path} is not root's")

    # --- The protocol's methods --------------------------------------------------------------

    def call(self, method: str, params: Any, *, stopping: threading.Event | None = None) -> Any:
        if not isinstance(params, dict):
            raise invalid("params must be an object")
        handlers = {
            "hello": self.hello,
            "run": lambda p: self.run(p, stopping=stopping),
            "result": self.result,
            "cancel": self.cancel,
            "stop_all": self.stop_all,
            "sandboxes": self.sandboxes,
            "install": self.install,
            "build_environment": lambda p: self.build_environment(p, stopping=stopping),
            "environments": self.environments,
            "tree_missing": lambda p: treesync.missing(self.state, p.get("tree"), p.get("shas")),
            "tree_store": lambda p: treesync.store(
                self.state, p.get("tree"), p.get("blobs"), p.get("part")
            ),
            "tree_fetch": self.tree_fetch,
            "release": self.release,
        }
        handler = handlers.get(method)
        if handler is None:
            raise RpcError(-32601, f"unknown method {method!r}")
        return handler(params)

    def hello(self, params: dict[str, Any]) -> dict[str, Any]:
        levels = []
        level_one = bwrap.available()
        levels.append({"level": 1, "available": level_one[0], "why": level_one[1]})
        level_two = level2.available()
        levels.append({"level": 2, "available": level_two[0], "why": level_two[1]})
        levels.append(
            {"level": 3, "available": False, "why": "no GUI virtual machine backend on Linux"}
        )
        return {
            "protocol": PROTOCOL,
            "runner_version": self.version,
            "node": self.node,
            "levels": levels,
            "telemetry": self.telemetry(),
            "sandboxes": len(self._active()),
        }

    def telemetry(self) -> dict[str, Any]:
        meminfo = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            meminfo[key] = int(rest.split()[0]) * 1024
        disk = os.statvfs(self.state)
        return {
            "collected_at": time.time(),
            "load1": float(Path("/proc/loadavg").read_text().split()[0]),
            "cpus": os.cpu_count() or 1,
            "mem_total": meminfo.get("MemTotal", 0),
            "mem_available": meminfo.get("MemAvailable", 0),
            "disk_free": disk.f_bavail * disk.f_frsize,
        }

    def run(
        self, params: dict[str, Any], *, stopping: threading.Event | None = None
    ) -> dict[str, Any]:
        """1. Accept the fence (or refuse a stale one). 2. Answer a stored result of the key.
        3. Under the key's lock, check both again (another process may have run it meanwhile).
        4. Run, write the result file, then answer."""
        step = step_id(params.get("step_id"))
        key = text(params.get("key"), "key")
        fence = parse_fence(params.get("fence"))
        profile = parse_profile(params.get("profile"))
        self._accept(step, fence)
        stored = self.stored(key)
        if stored is not None:
            return {**stored, "replayed": True}
        with files.locked(self.state / "locks" / f"key-{_digest(key)}.lock"):
            stored = self.stored(key)
            if stored is not None:
                return {**stored, "replayed": True}
            self._accept(step, fence)
            tree = params.get("tree")
            if tree is None:
                result = self.execute(
                    profile, params["profile"], ident=step, key=key, stopping=stopping
                )
            else:
                result = self._run_shipped(tree, profile, params["profile"], step, key, stopping)
            files.write_json(self._result_path(key), result)
            if os.environ.get(DIE_AFTER_RESULT_ENV):
                os.kill(os.getpid(), signal.SIGKILL)
        return result

    def _run_shipped(
        self,
        tree: Any,
        profile: Profile,
        raw: dict[str, Any],
        step: str,
        key: str,
        stopping: threading.Event | None,
    ) -> dict[str, Any]:
        """A step on the node's copy of its worktree (docs/cluster.md, "Worktrees on nodes"):
        the copy made equal to the shipped manifest, the profile's workdir rewritten to it, and
        what the command changed kept beside the result (before the result file names it)."""
        if not isinstance(tree, dict):
            raise invalid("tree must be an object")
        home = treesync.tree_dir(self.state, tree.get("name"))  # the name checked first
        name = home.name
        with files.locked(self.state / "locks" / f"tree-{name}.lock"):
            copy, before = treesync.checkout(
                self.state, name, tree.get("manifest"), (profile.uid, profile.gid)
            )
            placed = dataclasses.replace(profile, workdir=copy)
            result = self.execute(
                placed, {**raw, "workdir": str(copy)}, ident=step, key=key, stopping=stopping
            )
            kept = self._result_path(key).with_suffix(".tree")
            result["tree"] = {"name": home.name, **treesync.keep(copy, before, kept)}
        return result

    def tree_fetch(self, params: dict[str, Any]) -> dict[str, Any]:
        """Contents a step's result names (`tree.put`), at most a chunk an answer."""
        kept = self._result_path(text(params.get("key"), "key")).with_suffix(".tree")
        if "sha" in params:  # a content larger than a chunk, a part at a time
            return treesync.fetch_part(kept, params["sha"], params.get("offset"))
        return treesync.fetch(kept, params.get("shas"))

    def result(self, params: dict[str, Any]) -> dict[str, Any] | None:
        stored = self.stored(text(params.get("key"), "key"))
        return None if stored is None else {**stored, "replayed": True}

    def cancel(self, params: dict[str, Any]) -> dict[str, bool]:
        return {"cancelled": self._kill(step_id(params.get("step_id")), "cancelled")}

    def stop_all(self, params: dict[str, Any]) -> dict[str, list[str]]:
        stopped = [
            entry["step_id"] for entry in self._entries() if self._kill(entry["step_id"], "stopped")
        ]
        return {"stopped": sorted(stopped), "warm_vms": level2.warm_call("stop_all", self.state)}

    def release(self, params: dict[str, Any]) -> dict[str, bool]:
        """Destroy a run's warm level-2 VM (the run ended)."""
        key = _name(params.get("warm"), "warm")
        return {"released": bool(level2.warm_call("release", self.state, key))}

    def sandboxes(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {key: entry.get(key) for key in ("step_id", "key", "level", "pid", "started_at")}
            for entry in self._active()
        ]

    def install(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.root is None:
            raise unavailable(
                "this runner is not deployed under a node root (<root>/runner/versions/<v>):"
                " start it with --root"
            )
        return deploy.install(self.root, params)

    def build_environment(
        self, params: dict[str, Any], *, stopping: threading.Event | None = None
    ) -> dict[str, Any]:
        """Run the setup command with /env writable, freeze the tree read-only (root's, no write
        bit), record its digest; an existing complete version answers at once."""
        name = _name(params.get("name"), "name")
        version = _name(params.get("version"), "version")
        profile = parse_profile(params.get("profile"))
        if profile.level != 1:
            raise unavailable(f"environments are built at level 1, not {profile.level}")
        tree = params.get("tree")
        if isinstance(tree, dict):
            # The project's checkout, shipped from a control plane that shares no filesystem.
            tree_name = treesync.tree_dir(self.state, tree.get("name")).name  # checked here
            with files.locked(self.state / "locks" / f"tree-{tree_name}.lock"):
                copy, _ = treesync.checkout(
                    self.state, tree_name, tree.get("manifest"), (profile.uid, profile.gid)
                )
                raw = {**params["profile"], "workdir": str(copy)}
                try:
                    return self.build_environment(
                        {"name": name, "version": version, "profile": raw}, stopping=stopping
                    )
                finally:
                    _remove_tree(copy.parent)
        base = self.state / "environments" / name
        base.mkdir(mode=0o711, exist_ok=True)
        meta = base / f"{version}.json"
        with files.locked(self.state / "locks" / f"env-{name}-{version}.lock"):
            done = files.read_json(meta)
            if done is not None:
                return dict(done)
            target = base / version
            for leftover in [target, *base.glob(f".build-{version}-*")]:
                _remove_tree(leftover)
            building = base / f".build-{version}-{os.getpid()}"
            building.mkdir(mode=0o755)
            try:
                if os.geteuid() == 0:
                    os.chown(building, profile.uid, profile.gid)
                bwrap.check_reachable(building, profile.uid, profile.gid)
                ran = self.execute(
                    profile,
                    params["profile"],
                    ident=f"env-{name}-{version}"[:128],
                    key=None,
                    stopping=stopping,
                    env_dir=building,
                    env_writable=True,
                )
                if ran["exit_code"] != 0:
                    shown = (ran["output"] + ran["errors"])[-SETUP_OUTPUT_SHOWN:]
                    raise invalid(
                        f"the setup command of environment {name}@{version} failed"
                        f" (exit code {ran['exit_code']}, killed: {ran['killed']}): {shown}"
                    )
                digest = _freeze(building)
                building.rename(target)
                files.fsync_dir(base)
            except BaseException:
                _remove_tree(building)
                raise
            answer = {"name": name, "version": version, "digest": digest}
            files.write_json(meta, answer)
            return answer

    def environments(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        found = []
        for meta in sorted((self.state / "environments").glob("*/*.json")):
            value = files.read_json(meta)
            if isinstance(value, dict):
                found.append(value)
        return found

    # --- Running a profile -------------------------------------------------------------------

    def execute(
        self,
        profile: Profile,
        raw: dict[str, Any],
        *,
        ident: str | None = None,
        key: str | None = None,
        stopping: threading.Event | None = None,
        env_dir: Path | None = None,
        env_writable: bool = False,
    ) -> dict[str, Any]:
        """Run `profile` as sandbox `ident` (a step id; an anonymous one without), tracked in
        `active/` while it lives; no result file (`run` writes it)."""
        if ident is None:
            ident = f"anon-{os.getpid()}-{next(self._anonymous)}"
        environment = None
        if profile.environment is not None and env_dir is None:
            name, version = profile.environment
            if files.read_json(self.state / "environments" / name / f"{version}.json") is None:
                raise invalid(f"profile.environment: {name}@{version} is not built on this node")
            env_dir = self.state / "environments" / name / version
            environment = f"{name}@{version}"
        live = _Live(threading.Event())
        with self._lock:
            if ident in self._live:
                raise unavailable(f"sandbox {ident} is already running in this runner")
            self._live[ident] = live
        active = self.state / "active" / f"{ident}.json"
        marker = active.with_suffix(".cancel")
        marker.unlink(missing_ok=True)  # a cancel of an earlier attempt that had ended
        entry: dict[str, Any] = {
            "step_id": ident,
            "key": key,
            "level": profile.level,
            "owner": os.getpid(),
            "owner_start": files.start_time(os.getpid()),
            "pid": None,
            "start": None,
            "cgroups": [],
            "started_at": time.time(),
        }
        # Not fsynced: a live sandbox does not outlive a crash of its machine.
        files.write_json(active, entry, durable=False)
        done = threading.Event()
        watcher = threading.Thread(
            target=_watch_stop,
            args=(live, marker, stopping, done),
            name=f"runner-stop-{ident}",
            daemon=True,
        )
        watcher.start()

        def started(pid: int, groups: list[Path]) -> None:
            entry.update(pid=pid, start=files.start_time(pid), cgroups=[str(g) for g in groups])
            files.write_json(active, entry, durable=False)

        began = time.monotonic()
        try:
            if profile.level == 1:
                try:
                    result = bwrap.run(
                        profile,
                        stopping=live.stop,
                        env_dir=env_dir,
                        env_writable=env_writable,
                        started=started,
                    )
                except RpcError:
                    # Killed from another runner process while it started (its gate broke).
                    if not marker.exists():
                        raise
                    result = bwrap.cancelled_at_start(None, began, profile.limits)
            elif profile.level == 2 and profile.warm is not None:
                result = level2.run_warm(raw, self.state, live.stop, started)
            elif profile.level == 2:
                result = level2.run_one_shot(raw, self.state, live.stop)
            else:
                raise unavailable(f"level {profile.level} unavailable: no GUI VM backend on Linux")
        finally:
            done.set()
            watcher.join()
            with self._lock:
                self._live.pop(ident, None)
            reason = _read_reason(marker) or (live.reason[0] if live.reason else None)
            active.unlink(missing_ok=True)
            marker.unlink(missing_ok=True)
        if reason is not None and result["killed"] is None:
            # Killed from another runner process: its sandbox died of a signal we sent.
            result.update(exit_code=None, killed="cancelled")
        return {
            **result,
            "runner_version": self.version,
            "node": self.node,
            "environment": environment,
            "replayed": False,
        }

    # --- Fences and results ------------------------------------------------------------------

    def _accept(self, step: str, fence: int) -> None:
        path = self.state / "fences" / f"{step}.json"
        with files.locked(self.state / "locks" / f"fence-{step}.lock"):
            accepted = files.read_json(path)
            if accepted is not None and fence < accepted["fence"]:
                raise RpcError(
                    STALE_FENCE,
                    f"stale fence {fence} for step {step}: fence {accepted['fence']} already"
                    " accepted",
                )
            if accepted is None or fence > accepted["fence"]:
                files.write_json(path, {"step_id": step, "fence": fence})

    def _result_path(self, key: str) -> Path:
        return self.state / "results" / f"{_digest(key)}.json"

    def stored(self, key: str) -> dict[str, Any] | None:
        value = files.read_json(self._result_path(key))
        return dict(value) if isinstance(value, dict) else None

    # --- Live sandboxes ----------------------------------------------------------------------

    def _entries(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted((self.state / "active").glob("*.json")):
            with contextlib.suppress(ValueError, OSError):
                value = json.loads(path.read_bytes())
                if isinstance(value, dict):
                    found.append(value)
        return found

    def _active(self) -> list[dict[str, Any]]:
        """Entries whose owner runner process lives; the others' files are removed (their
        sandbox died with the owner: bwrap runs --die-with-parent)."""
        alive = []
        for entry in self._entries():
            if files.alive(entry.get("owner"), entry.get("owner_start")):
                alive.append(entry)
            else:
                _kill_entry(entry)
                (self.state / "active" / f"{entry['step_id']}.json").unlink(missing_ok=True)
        return alive

    def _kill(self, ident: str, reason: str) -> bool:
        """Kill sandbox `ident`, whichever runner process owns it: tell the owner why (the marker,
        which it also watches), then kill its process group and cgroups from here (an owner that
        is stopped or stuck still loses its sandbox)."""
        with self._lock:
            live = self._live.get(ident)
        if live is not None:
            live.reason.append(reason)
            live.stop.set()
        active = self.state / "active" / f"{ident}.json"
        entry = files.read_json(active)
        if entry is None:
            return live is not None
        files.write_atomic(active.with_suffix(".cancel"), reason.encode())
        _kill_entry(entry)
        return live is not None or files.alive(entry.get("owner"), entry.get("owner_start"))


def _kill_entry(entry: dict[str, Any]) -> None:
    if files.alive(entry.get("pid"), entry.get("start")):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(entry["pid"], signal.SIGKILL)
    cgroups.kill(Path(path) for path in entry.get("cgroups") or [])


def _watch_stop(
    live: _Live, marker: Path, stopping: threading.Event | None, done: threading.Event
) -> None:
    """The sandbox's stop: the caller's event (in-process) or a cancel marker another runner
    process wrote."""
    while not done.wait(CANCEL_POLL_SECONDS):
        if stopping is not None and stopping.is_set():
            live.stop.set()
            return
        if marker.exists():
            live.reason.append(_read_reason(marker) or "cancelled")
            live.stop.set()
            return


def _read_reason(marker: Path) -> str | None:
    try:
        return marker.read_text() or "cancelled"
    except FileNotFoundError:
        return None


# --- Environments ------------------------------------------------------------------------------


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise invalid(f"{field} must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}, not {value!r}")
    return value


def _freeze(top: Path) -> str:
    """Make the built tree root's and read-only (directories 0555, files 0444 or 0555), and
    return its digest: sha256 over each entry's path, kind, mode and content or link target.
    The setup command's processes are all gone (its pid namespace is): nothing moves under us;
    links are never followed."""
    digest = hashlib.sha256()
    entries: list[tuple[str, str, int, bytes]] = []
    for directory, dirnames, filenames, dirfd in os.fwalk(top, follow_symlinks=False):
        relative = os.path.relpath(directory, top)
        for name in [*dirnames, *filenames]:
            info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            path = (Path(relative) / name).as_posix()
            if stat.S_ISLNK(info.st_mode):
                if os.geteuid() == 0:
                    os.chown(name, 0, 0, dir_fd=dirfd, follow_symlinks=False)
                entries.append((path, "link", 0, os.readlink(name, dir_fd=dirfd).encode()))
                continue
            if stat.S_ISDIR(info.st_mode):
                kind, mode = "dir", 0o555
            elif stat.S_ISREG(info.st_mode):
                kind, mode = "file", 0o555 if info.st_mode & 0o111 else 0o444
            else:
                os.unlink(name, dir_fd=dirfd)  # a FIFO or a socket has no place in an environment
                continue
            if os.geteuid() == 0:
                os.chown(name, 0, 0, dir_fd=dirfd, follow_symlinks=False)
            os.chmod(name, mode, dir_fd=dirfd)
            content = b""
            if stat.S_ISREG(info.st_mode):
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
                with os.fdopen(fd, "rb") as file:
                    content = hashlib.sha256(file.read()).digest()
            entries.append((path, kind, mode, content))
    if os.geteuid() == 0:
        os.chown(top, 0, 0)
    top.chmod(0o555)
    for path, kind, mode, content in sorted(entries):
        digest.update(f"{len(path)}:{path}:{kind}:{mode:o}:".encode() + content + b"\n")
    return digest.hexdigest()


def _remove_tree(path: Path) -> None:
    """Remove a (possibly frozen, read-only) tree."""
    if not path.exists() and not path.is_symlink():
        return
    for _directory, _dirnames, _filenames, dirfd in os.fwalk(path, follow_symlinks=False):
        with contextlib.suppress(OSError):
            os.fchmod(dirfd, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
