"""The node's warm level-2 VMs: one per run (the profile's `warm` key), each kept by a supervisor
process of its own, so that every runner process of the node (one per SSH channel, or the
control plane's in-process handler) reaches the same VM.

Files, under the runner's state directory:
- `warm/<digest>.json`: the supervisor's pid and start time, the VM's signature (what it was
  booted with: `vmwarm.signature`) and boot id. Written by the supervisor once its VM is ready,
  removed when it ends; one whose process is gone is stale and ignored.
- `warm/<digest>.sock`: where the supervisor takes one command at a time (a JSON line in, the
  result as a JSON line out). Only root (the runner) reaches the directory.
- `locks/warm-<digest>.lock`: held by a runner process for the whole of one command (boot
  included), and by the supervisor when it ends itself for idleness, so that neither ends the
  other mid-command.

Ends of a VM: `release` (the run ended), `stop_all` (the kill switch), a cancelled command (the
runner kills the supervisor: bubblewrap runs QEMU --die-with-parent, so the VM goes with it),
IDLE seconds without a command, a lost VM (the supervisor exits), or a command whose signature
differs (another worktree, memory size, egress socket: the old VM is killed, a new one booted).
A runner process that dies mid-command closes its connection: the supervisor kills that command
and keeps the VM. Nothing of a VM outlives its supervisor, and no supervisor outlives IDLE.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.runner import bwrap, files
from cluster.runner.protocol import (
    NAME,
    Profile,
    RpcError,
    invalid,
    parse_profile,
    unavailable,
)

IDLE_ENV = "AGENTOS_VM_WARM_IDLE_SECONDS"
IDLE_SECONDS = 300.0
READY_EXTRA_SECONDS = 180.0  # on top of a boot: the node's first image build and probe
MAX_LINE = 256 << 20  # a command's profile (its stdin at most 64 MiB, base64) or its result
POLL_SECONDS = 0.1
PID_SECONDS = 10.0  # how long a stopped runner waits for a starting supervisor's pid
LATE_STOP_SECONDS = 0.5  # a few of the handler's cancel polls
KILL_SECONDS = 5.0  # how long a killed VM's processes are waited for
VM_FIELDS = ("key", "pid", "boot_id", "booted_at")  # what `vms` tells of each
ROOT = Path(__file__).resolve().parents[2]  # where `cluster.runner` is importable from


class WarmUnavailable(RuntimeError):
    """The warm path could not start at all (not a VM's failure): run the command one-shot."""


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _directory(state: Path) -> Path:
    path = state / "warm"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _entry(state: Path, digest: str) -> dict[str, Any] | None:
    """The live supervisor of `digest`, or None (a stale file is removed)."""
    path = _directory(state) / f"{digest}.json"
    value: Any = {}
    with contextlib.suppress(ValueError):
        value = files.read_json(path)
    if value is None:
        return None  # none (a supervisor that is starting binds its socket first: leave it)
    if isinstance(value, dict) and files.alive(value.get("pid"), value.get("start")):
        return value
    path.unlink(missing_ok=True)
    path.with_suffix(".sock").unlink(missing_ok=True)  # a killed supervisor's
    return None


def _kill(entry: dict[str, Any], state: Path | None = None, digest: str = "") -> None:
    """Kill a supervisor and its VM, and wait until they are gone (bounded): a caller told the
    VM is destroyed finds none of its processes left. With `state`, forget its files too (a
    killed supervisor removes nothing)."""
    if files.alive(entry.get("pid"), entry.get("start")):
        pid = int(entry["pid"])
        # Bubblewrap (its own session) would die of its parent's death, but later: kill it too.
        doomed = [(pid, entry.get("start")), *_descendants(pid)]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for each, started in doomed[1:]:
            if files.alive(each, started):  # not a pid reused since it was listed
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(each, signal.SIGKILL)
        deadline = time.monotonic() + KILL_SECONDS
        while time.monotonic() < deadline and any(files.alive(*each) for each in doomed):
            time.sleep(0.02)
    if state is not None:
        for suffix in (".json", ".sock"):
            (_directory(state) / f"{digest}{suffix}").unlink(missing_ok=True)


def _descendants(pid: int) -> list[tuple[int, str | None]]:
    """The processes below `pid` (pid and start time), from /proc's parent links."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue  # gone meanwhile
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = [], list(parents.get(pid, []))
    while queue:
        child = queue.pop()
        found.append((child, files.start_time(child)))
        queue.extend(parents.get(child, []))
    return found


# --- What the runner calls ------------------------------------------------------------------------


def run_profile(
    raw: dict[str, Any],
    *,
    state: Path,
    stopping: threading.Event | None = None,
    started: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run a level-2 profile that names its warm VM (`warm`) in that VM, booted first if need
    be; the protocol's sandbox result, with `guest_seconds` (the command's own time) and
    `boot_id` (the guest's: equal for two commands of one VM). What the runner's handler calls,
    and any code of the node that runs commands in a run's VM. `state` is the runner's state
    directory. Raises `RpcError` (-32602 a bad profile, -32011 a VM that cannot boot or was lost
    mid-command) and `WarmUnavailable` (no supervisor could start: run it one-shot)."""
    from cluster.runner import vm
    from cluster.runner.vmrun import VmUnavailable

    profile, env_dir = vm.checked(parse_profile(raw), state)
    if profile.warm is None:
        raise invalid("profile.warm: a warm VM's key is required here")
    try:
        node = vm.prepare()
    except VmUnavailable as error:
        raise unavailable(f"level 2 unavailable: {error}") from error
    return execute(
        raw,
        profile,
        state=state,
        env_dir=env_dir,
        stopping=stopping or threading.Event(),
        started=started,
        boot_seconds=vm.BOOT_SECONDS[node.accelerator],
    )


def execute(
    raw: dict[str, Any],
    profile: Profile,
    *,
    state: Path,
    env_dir: Path | None,
    stopping: threading.Event,
    started: Callable[[int], None] | None = None,
    boot_seconds: float,
) -> dict[str, Any]:
    """Run the profile's command in its run's warm VM, booting one first when there is none (or
    one booted for other settings). Raises `WarmUnavailable` when no supervisor could start,
    `RpcError` (unavailable) when the VM cannot boot or is lost mid-command."""
    from cluster.runner import vmwarm  # QEMU's modules: only on a node with level 2

    assert profile.warm is not None  # noqa: S101 (the handler's condition)
    digest = _digest(profile.warm)
    signature = vmwarm.signature(profile, env_dir)
    lock = _wait_lock(state / "locks" / f"warm-{digest}.lock", stopping)
    if lock is None:
        return _cancelled(profile, 0.0)  # stopped while another command of the run ran
    try:
        booted = 0.0
        answer: dict[str, Any] = {}
        for _attempt in range(2):
            entry = _entry(state, digest)
            if entry is not None and entry.get("signature") != signature:
                _kill(entry, state, digest)
                entry = None
            if entry is None and stopping.is_set():
                return _cancelled(profile, booted)
            if entry is None:
                entry, seconds = _spawn(raw, state, digest, env_dir, stopping, boot_seconds)
                booted += seconds
                if entry is None:
                    return _cancelled(profile, booted)
            if started is not None:
                started(int(entry["pid"]))  # a cancel from another runner process kills it
            began = time.monotonic()
            got = _ask(state, digest, entry, {"profile": raw}, stopping)
            if got is None:
                return _cancelled(profile, booted + time.monotonic() - began)
            answer = got
            if "lost" in answer or "gone" in answer:
                _kill(entry, state, digest)  # it may still be ending: forget it now
            if "gone" not in answer:
                break
            # The VM had died while idle: nothing ran; boot a fresh one, once.
    finally:
        os.close(lock)  # the flock goes with it
    if "gone" in answer:
        raise unavailable(f"level 2: the warm virtual machine is gone ({answer['gone']})")
    if "lost" in answer:
        raise unavailable(
            f"level 2: the virtual machine was lost mid-command ({answer['lost']}); the run's"
            " next command boots a fresh one"
        )
    if "error" in answer:
        raise invalid(str(answer["error"]))
    result: dict[str, Any] = answer["result"]
    result["boot_seconds"] = round(booted, 3)
    return result


@dataclass(frozen=True)
class WarmVmHandle:
    """A run's warm VM on this node, by its key: `exec` runs a level-2 profile in it (booting it
    first if there is none), `release` destroys it. Any thread or process of the node may hold
    one; the VM itself lives in its supervisor."""

    state: Path
    key: str

    def exec(
        self, profile: dict[str, Any], *, stopping: threading.Event | None = None
    ) -> dict[str, Any]:
        return run_profile({**profile, "warm": self.key}, state=self.state, stopping=stopping)

    def booted(self) -> dict[str, Any] | None:
        """The live VM's key, supervisor pid, boot id and boot time, or None."""
        entry = _entry(self.state, _digest(self.key))
        return None if entry is None else {k: entry.get(k) for k in VM_FIELDS}

    def release(self) -> bool:
        return release(self.state, self.key)


def warm_vm(state: Path, key: str) -> WarmVmHandle:
    """The warm VM of `key` (a run's: `run-<id>`) under the runner state directory `state`."""
    if not NAME.match(key):
        raise invalid(f"warm: {key!r} is not a key ([A-Za-z0-9][A-Za-z0-9_.-]{{0,63}})")
    return WarmVmHandle(state, key)


def release(state: Path, key: str) -> bool:
    """Destroy `key`'s warm VM (its run ended); whether there was one."""
    entry = _entry(state, _digest(key))
    if entry is None:
        return False
    _kill(entry, state, _digest(key))
    return True


def stop_all(state: Path) -> list[str]:
    """Destroy every warm VM of the node (the kill switch); the keys of those there were."""
    stopped = []
    for path in sorted(_directory(state).glob("*.json")):
        entry = _entry(state, path.stem)
        if entry is not None:
            _kill(entry, state, path.stem)
            stopped.append(str(entry.get("key")))
    return stopped


def vms(state: Path) -> list[dict[str, Any]]:
    """The node's live warm VMs (key, pid, boot id, since when)."""
    found = []
    for path in sorted(_directory(state).glob("*.json")):
        entry = _entry(state, path.stem)
        if entry is not None:
            found.append({k: entry.get(k) for k in VM_FIELDS})
    return found


def _cancelled(profile: Profile, seconds: float) -> dict[str, Any]:
    """A command stopped before it ran in the VM: level 1's stopped result, no boot counted."""
    began = time.monotonic() - seconds
    return {**bwrap.cancelled_at_start(None, began, profile.limits), "boot_seconds": 0.0}


def _spawn(
    raw: dict[str, Any],
    state: Path,
    digest: str,
    env_dir: Path | None,
    stopping: threading.Event,
    boot_seconds: float,
) -> tuple[dict[str, Any] | None, float]:
    """Start a supervisor and wait until its VM is ready: (its entry, the seconds it took), or
    (None, seconds) when stopped meanwhile (it is killed)."""
    began = time.monotonic()
    idle = float(os.environ.get(IDLE_ENV) or IDLE_SECONDS)
    environ = {k: v for k, v in os.environ.items() if k.startswith("AGENTOS_VM_")}
    environ.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", PYTHONPATH=str(ROOT))
    environ["HOME"] = os.environ.get("HOME", "/")
    request = {"profile": raw, "idle": idle}
    try:
        # The supervisor forks and its first process exits at once: nobody has to reap it later.
        process = subprocess.Popen(  # noqa: S603 (our own module)
            [sys.executable, "-m", "cluster.runner.vmpool", str(state), digest],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=environ,
        )
        assert process.stdin is not None  # noqa: S101 (PIPE)
        assert process.stdout is not None  # noqa: S101 (PIPE)
        process.stdin.write(json.dumps(request).encode())
        process.stdin.close()
        process.wait()
    except OSError as error:
        raise WarmUnavailable(f"cannot start a warm VM's supervisor: {error}") from error
    said = _hear(process.stdout, began + boot_seconds + READY_EXTRA_SECONDS, stopping)
    answer = said[-1] if said else None
    entry = _entry(state, digest)
    if not isinstance(answer, dict) or "ready" not in answer:
        # Stopped, failed or silent while it booted: it must not boot on for nobody.
        for found in (entry, said[0] if said else None):
            if isinstance(found, dict) and "pid" in found:
                _kill(found, state, digest)
        if stopping.is_set():
            return None, time.monotonic() - began
        if isinstance(answer, dict) and "error" in answer:
            raise unavailable(f"level 2: {answer['error']}")
        raise WarmUnavailable(f"the warm VM's supervisor said {said!r}"[:2000])
    if entry is None:
        raise WarmUnavailable("the warm VM's supervisor ended once ready")
    return entry, time.monotonic() - began


def _hear(stdout: Any, deadline: float, stopping: threading.Event) -> list[Any]:
    """The supervisor's lines (JSON each): its pid first, then ready or why not; until its
    stdout closes, the deadline or a stop."""
    received = b""
    with stdout, selectors.DefaultSelector() as waiting:
        waiting.register(stdout, selectors.EVENT_READ)
        while received.count(b"\n") < 2 and time.monotonic() < deadline:
            if stopping.is_set() and b"\n" in received:
                break  # stopped, and its pid known: the caller kills it
            if stopping.is_set():
                deadline = min(deadline, time.monotonic() + PID_SECONDS)
            if waiting.select(POLL_SECONDS):
                chunk = os.read(stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                received += chunk
    said = []
    for line in received.splitlines():
        with contextlib.suppress(ValueError):
            said.append(json.loads(line))
    return said


def _ask(
    state: Path,
    digest: str,
    entry: dict[str, Any],
    request: dict[str, Any],
    stopping: threading.Event,
) -> dict[str, Any] | None:
    """Send one command to the supervisor and wait for its answer; None if stopped meanwhile
    (the supervisor is killed: a cancelled command's VM is destroyed)."""
    directory = os.open(_directory(state), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            try:
                # Through the directory's descriptor: a socket's path may not exceed 107 bytes.
                client.connect(f"/proc/self/fd/{directory}/{digest}.sock")
            except OSError as error:
                return {"gone": f"its supervisor does not answer ({error})"}
            client.sendall(json.dumps(request).encode() + b"\n")
            received = bytearray()
            with selectors.DefaultSelector() as waiting:
                waiting.register(client, selectors.EVENT_READ)
                while not received.endswith(b"\n"):
                    if stopping.is_set():
                        _kill(entry, state, digest)
                        return None
                    if waiting.select(POLL_SECONDS):
                        chunk = client.recv(1 << 20)
                        if not chunk:
                            break
                        received += chunk
                        if len(received) > MAX_LINE:
                            break
    except OSError as error:
        return {"lost": f"its supervisor does not answer ({error})"}
    finally:
        os.close(directory)
    with contextlib.suppress(ValueError):
        answer = json.loads(received)
        if isinstance(answer, dict):
            return answer
    # Killed by a cancel from another runner process: its marker sets our stop a moment later.
    if stopping.wait(LATE_STOP_SECONDS):
        return None
    return {"lost": "its supervisor ended without an answer"}


# --- The supervisor ---------------------------------------------------------------------------


class _Supervisor:
    def __init__(self, state: Path, digest: str, request: dict[str, Any]) -> None:
        from cluster.runner import vm

        self.state = state
        self.digest = digest
        self.profile, self.env_dir = vm.checked(parse_profile(request["profile"]), state)
        self.idle = float(request["idle"])
        self.node = vm.prepare()
        self.boot_seconds = vm.BOOT_SECONDS[self.node.accelerator]

    def run(self) -> None:
        """1. Boot the VM. 2. Listen, write the entry, say ready. 3. Serve commands until idle,
        lost or killed. 4. Remove the entry and the socket (if still ours), destroy the VM."""
        from cluster.runner import vmwarm

        directory = _directory(self.state)
        entry_path = directory / f"{self.digest}.json"
        socket_path = directory / f"{self.digest}.sock"
        self.vm = vmwarm.WarmVm.boot(self.node, self.profile, self.boot_seconds, self.env_dir)
        self.signature = vmwarm.signature(self.profile, self.env_dir)
        try:
            socket_path.unlink(missing_ok=True)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            dirfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            listener.bind(f"/proc/self/fd/{dirfd}/{self.digest}.sock")
            os.close(dirfd)
            listener.listen(4)
            entry = {
                "key": self.profile.warm,
                "pid": os.getpid(),
                "start": files.start_time(os.getpid()),
                "signature": self.signature,
                "boot_id": self.vm.boot_id,
                "booted_at": time.time(),
            }
            files.write_json(entry_path, entry, durable=False)
            _say({"ready": {"boot_id": self.vm.boot_id, "seconds": self.vm.boot_seconds}})
            self.serve(listener)
        finally:
            self.vm.close()
            with contextlib.suppress(ValueError):
                mine = files.read_json(entry_path)
                if isinstance(mine, dict) and mine.get("pid") == os.getpid():
                    entry_path.unlink(missing_ok=True)
                    socket_path.unlink(missing_ok=True)

    def serve(self, listener: socket.socket) -> None:
        lock = self.state / "locks" / f"warm-{self.digest}.lock"
        listener.settimeout(self.idle)
        while self.vm.alive():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                if _try_lock(lock):
                    return  # idle, and no runner about to send a command: the lock is kept
                continue
            with connection:
                self.handle(connection)

    def handle(self, connection: socket.socket) -> None:
        from cluster.runner import vm, vmwarm
        from cluster.runner.watch import DiskWatch

        connection.settimeout(None)
        reader = connection.makefile("rb")
        line = reader.readline(MAX_LINE)
        try:
            profile, _ = vm.checked(parse_profile(json.loads(line)["profile"]), self.state)
        except (ValueError, KeyError, TypeError) as error:
            _send(connection, {"error": f"a bad warm request: {error}"})
            return
        except RpcError as error:
            _send(connection, {"error": error.message})
            return
        if not self.vm.alive():
            _send(connection, {"gone": self.vm.lost or "the virtual machine ended"})
            return
        if vmwarm.signature(profile, self.env_dir) != self.signature:
            _send(connection, {"error": "this warm VM was booted for other settings"})
            return
        # The runner's end closing (it died) is this command's stop; the VM stays.
        stopping = threading.Event()
        threading.Thread(target=_watch_close, args=(reader, stopping), daemon=True).start()
        disk = DiskWatch(profile.workdir or Path(), profile.limits.disk_bytes)
        if profile.workdir is not None:
            disk.start()
        try:
            result = self.vm.exec(profile, stopping=stopping, disk=disk)
        except vmwarm.VmLost as error:
            _send(connection, {"lost": str(error)})
            return
        finally:
            disk.stop()
        _send(connection, {"result": result})


def _watch_close(reader: Any, stopping: threading.Event) -> None:
    with contextlib.suppress(OSError, ValueError):
        reader.read(1)
    stopping.set()


def _send(connection: socket.socket, answer: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(answer).encode() + b"\n")


def _wait_lock(path: Path, stopping: threading.Event) -> int | None:
    """The key's lock (its descriptor: closing it unlocks), waited for while another command of
    the run holds it; None once stopped meanwhile."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if stopping.wait(POLL_SECONDS):
                os.close(fd)
                return None
            continue
        return fd


def _try_lock(path: Path) -> bool:
    """Take the key's lock without waiting (kept until this process exits)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    return True


def _say(answer: dict[str, Any]) -> None:
    """One line to the runner that started us, then our stdout is closed."""
    with contextlib.suppress(OSError):
        os.write(1, json.dumps(answer).encode() + b"\n")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def main(argv: list[str]) -> None:
    """`python -m cluster.runner.vmpool <state> <digest>`, the request on stdin."""
    from cluster.runner.vmrun import VmUnavailable

    state, digest = Path(argv[0]), argv[1]
    request = json.loads(sys.stdin.buffer.read())
    if os.fork() != 0:
        os._exit(0)  # the runner reaps this first process at once; we live on detached
    os.setsid()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))
    # Who we are, first: a runner stopped while we boot kills us.
    os.write(1, json.dumps({"pid": os.getpid(), "start": files.start_time(os.getpid())}).encode())
    os.write(1, b"\n")
    try:
        _Supervisor(state, digest, request).run()
    except VmUnavailable as error:
        _say({"error": str(error)})
    except Exception as error:
        _say({"failed": f"{type(error).__name__}: {error}"})
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
