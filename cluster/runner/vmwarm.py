"""One warm level-2 VM: booted once for a run, then command after command through the guest's
command server (`vmguest`), until it is closed or lost.

The VM is the one-shot VM of `vmrun` (the same image, QEMU in the same bubblewrap sandbox as the
run's uid, the same seccomp filter, shares and network), with one more virtio serial port, `ctl`,
a socket pair whose far end QEMU holds. We write requests on it; the guest answers in frames of
our own format (`vmguest`: a kind byte, a length, at most MAX_FRAME of payload). A frame of an
unknown kind, too long, or an exit report that is not the small JSON object we expect ends the VM:
nothing else the guest sends is interpreted (output is counted and kept as bytes).

Each command has its own wall clock, output cap, disk quota and stop. A kill asks the guest to
kill the command's uid; a guest that does not confirm within KILL_GRACE_SECONDS is destroyed.
A VM that dies or misbehaves mid-command raises `VmLost`: that command's attempt is lost, the VM
is gone, and the caller boots a fresh one for the next.

Bubblewrap runs QEMU with --die-with-parent: the VM dies with the *thread* that booted it, so a
process keeping VMs boots them from its main thread (`vmpool`'s supervisor does).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from cluster.runner import bwrap, vmlaunch
from cluster.runner.protocol import Profile
from cluster.runner.vmrun import CONSOLE_KEPT, INFO_SECONDS, VmUnavailable
from cluster.runner.watch import DiskWatch

MAX_FRAME = 1 << 16  # vmguest.MAX_FRAME
MAX_REPORT = 1024  # an exit or ready report is a few numbers
KILL_GRACE_SECONDS = 3.0
SERVER = (Path(__file__).parent / "vmguest.py").read_bytes()
SECRET_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")  # the token is in their URL


class VmLost(RuntimeError):
    """The VM died or broke our framing mid-command: the command's attempt is lost."""


def signature(profile: Profile, env_dir: Path | None) -> str:
    """What a VM is booted with, as opposed to what each command brings: a command whose
    signature differs from the VM's needs another VM."""
    workdir = profile.workdir
    git = vmlaunch.git_mode(workdir, profile.writable) if workdir is not None else "none"
    return json.dumps(
        [
            profile.uid,
            profile.gid,
            profile.user,
            None if workdir is None else str(workdir),
            git,
            None if profile.egress_socket is None else str(profile.egress_socket),
            None if env_dir is None else str(env_dir),
            profile.limits.memory_bytes,
            profile.limits.cpus,
            profile.limits.tmp_bytes,
        ]
    )


class WarmVm:
    """`WarmVm.boot(...)` starts one; `exec(profile)` runs a command; `close()` destroys it."""

    def __init__(
        self, process: subprocess.Popen[bytes], ctl: socket.socket, pid1: int | None, console: int
    ) -> None:
        self.process = process
        self.ctl = ctl
        self.pid1 = pid1  # a pidfd of bubblewrap's pid 1: killing it takes QEMU and socat along
        self.console = bytearray()
        self.boot_id = ""
        self.boot_seconds = 0.0
        self.lost = ""
        self.buffer = bytearray()
        self._pump = threading.Thread(
            target=self._drain, args=(console,), name="vm-console", daemon=True
        )

    # --- Booting ---------------------------------------------------------------------------

    @classmethod
    def boot(
        cls,
        node: vmlaunch.Node,
        profile: Profile,
        boot_seconds: float,
        env_dir: Path | None = None,
    ) -> WarmVm:
        """Start QEMU and wait for the guest's ready frame; `VmUnavailable` if it never comes."""
        workdir = profile.workdir
        git = vmlaunch.git_mode(workdir, profile.writable) if workdir is not None else "none"
        archive = vmlaunch.run_archive(profile, git, environment=env_dir is not None, server=SERVER)
        initrd = os.memfd_create("agentos-vm-initrd")
        kernel = os.open(node.image.kernel, os.O_RDONLY | os.O_CLOEXEC)
        console_read, console_write = os.pipe2(os.O_CLOEXEC)
        os.fchown(console_write, profile.uid, profile.gid)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        info_read, info_write = os.pipe2(os.O_CLOEXEC)
        started = time.monotonic()
        try:
            with Path(node.image.initrd).open("rb") as base, os.fdopen(os.dup(initrd), "wb") as out:
                shutil.copyfileobj(base, out)
            os.lseek(initrd, 0, os.SEEK_END)
            os.write(initrd, archive)
            command = vmlaunch.bwrap_command(node, profile, env_dir, info_write)
            pipes = {"console": console_write}
            command += vmlaunch.qemu_command(node, profile, git, kernel, initrd, pipes)
            command += ["-chardev", f"socket,id=ctl,fd={theirs.fileno()}"]
            command += ["-device", "virtserialport,chardev=ctl,name=ctl"]
            if env_dir is not None:
                command += vmlaunch.share("env", bwrap.ENV, readonly=True)
            drop: dict[str, Any] = {}
            if os.geteuid() == 0:
                kvm_group = [Path("/dev/kvm").stat().st_gid] if node.accelerator == "kvm" else []
                drop = {"user": profile.uid, "group": profile.gid, "extra_groups": kvm_group}
            process = subprocess.Popen(  # noqa: S603 (fixed programs; the guest's argv is data)
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=console_write,  # QEMU's own complaints, with the console's tail
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                cwd="/",
                pass_fds=[info_write, initrd, kernel, console_write, theirs.fileno()],
                start_new_session=True,
                **drop,
            )
        finally:
            for fd in (initrd, kernel, console_write, info_write):
                os.close(fd)
            theirs.close()
        vm = cls(process, ours, _pid1(info_read), console_read)
        os.close(info_read)
        vm._pump.start()
        try:
            kind, payload = vm._frame(started + boot_seconds)
            if kind != b"R":
                raise VmLost(f"the guest answered {kind!r} before it was ready")
            vm.boot_id = str(_report(payload).get("boot_id", ""))
        except (VmLost, TimeoutError) as error:
            vm.close()
            vm._pump.join(2)
            console = vm.console.decode("utf-8", "replace").strip()[-2000:]
            raise VmUnavailable(
                f"the warm virtual machine did not boot within {boot_seconds:g} s ({error};"
                f" console: {console or 'nothing'})"
            ) from None
        vm.boot_seconds = round(time.monotonic() - started, 3)
        return vm

    def _drain(self, fd: int) -> None:
        """Keep the console's tail (QEMU would stall on a full pipe); ends when QEMU is gone."""
        try:
            while chunk := os.read(fd, 1 << 16):
                self.console += chunk
                del self.console[:-CONSOLE_KEPT]
        finally:
            os.close(fd)

    # --- Running ---------------------------------------------------------------------------

    def alive(self) -> bool:
        return not self.lost and self.process.poll() is None

    def exec(
        self,
        profile: Profile,
        *,
        stopping: threading.Event | None = None,
        disk: DiskWatch | None = None,
    ) -> dict[str, Any]:
        """Run the profile's command; the protocol's sandbox result (`vmrun`'s fields, with
        `boot_seconds` 0 and `guest_seconds`, the command's own time in the guest). Raises
        `VmLost` (the VM is closed) when the VM dies or breaks the framing meanwhile."""
        if not self.alive():
            raise VmLost(self.lost or "the virtual machine is gone")
        limits = profile.limits
        request = {
            "op": "run",
            "argv": profile.argv,
            "env": guest_env(profile),
            "uid": profile.uid,
            "gid": profile.gid,
            "stdin": profile.stdin.hex(),
            "stderr_apart": profile.stderr_apart,
            "limits": {
                "processes": limits.processes,
                "file_bytes": limits.file_bytes,
                "cpu_seconds": limits.cpu_seconds,
            },
        }
        if profile.service is not None:
            request["service"] = {
                "argv": profile.service.argv,
                "env": service_env(profile),
                "cpu_seconds": profile.service.cpu_seconds,
            }
        kept = {b"O": bytearray(), b"E": bytearray()}
        dropped = 0
        killed: str | None = None
        reason = ""
        started = time.monotonic()
        deadline = started + limits.wall_seconds
        kill_deadline = 0.0
        try:
            self._send(request)
            while True:
                now = time.monotonic()
                if killed is None:
                    if stopping is not None and stopping.is_set():
                        killed = "cancelled"
                    elif now >= deadline:
                        killed = "timeout"
                    elif disk is not None and disk.over.is_set():
                        killed = "disk"
                        reason = f"the workspace grew past {limits.disk_bytes // 2**20} MB"
                    if killed is not None:
                        self._send({"op": "kill"})
                        kill_deadline = now + KILL_GRACE_SECONDS
                try:
                    kind, payload = self._frame(min(now + 0.1, kill_deadline or deadline))
                except TimeoutError:
                    if killed is not None and time.monotonic() >= kill_deadline:
                        raise VmLost("the guest did not kill the command in time") from None
                    continue
                if kind in kept:
                    room = max(limits.output_bytes - len(kept[b"O"]) - len(kept[b"E"]), 0)
                    kept[kind] += payload[:room]
                    dropped += max(len(payload) - room, 0)
                elif kind == b"X":
                    report = _report(payload)
                    break
                else:
                    raise VmLost(f"the guest sent a frame of unknown kind {kind!r}")
        except (VmLost, OSError) as error:
            self.lost = str(error) or type(error).__name__
            self.close()
            raise VmLost(self.lost) from None
        finished = time.monotonic()
        code, oom, seconds = report.get("code"), report.get("oom"), report.get("seconds")
        if type(code) is not int or type(oom) is not int or not isinstance(seconds, int | float):
            self.lost = "the guest's exit report is malformed"
            self.close()
            raise VmLost(self.lost)
        duration_ms = int((finished - started) * 1000)
        return {
            "exit_code": None if killed else code,
            "output": kept[b"O"].decode("utf-8", errors="replace"),
            "errors": kept[b"E"].decode("utf-8", errors="replace"),
            "truncated": dropped > 0,
            "truncated_bytes": dropped,
            "killed": killed or ("memory" if oom else None),
            "reason": reason,
            "out_of_memory": max(oom, 0),
            "memory_limit": limits.memory_bytes,
            "seconds": duration_ms / 1000,
            "duration_ms": duration_ms,
            "boot_seconds": 0.0,
            "guest_seconds": float(seconds),
            "boot_id": self.boot_id,
        }

    def close(self) -> None:
        """Destroy the VM (idempotent): bubblewrap's pid 1, then its process group."""
        if self.pid1 is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pid1, signal.SIGKILL)
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.pid1 is not None:
            os.close(self.pid1)
            self.pid1 = None
        with contextlib.suppress(OSError):
            self.ctl.close()
        self.lost = self.lost or "closed"

    # --- Our framing -----------------------------------------------------------------------

    def _send(self, request: dict[str, Any]) -> None:
        data = json.dumps(request).encode()
        self.ctl.sendall(struct.pack(">I", len(data)) + data)

    def _frame(self, deadline: float) -> tuple[bytes, bytes]:
        """The next frame, or TimeoutError at `deadline`; VmLost at EOF or a frame too long."""
        while True:
            if len(self.buffer) >= 5:
                kind = bytes(self.buffer[:1])
                (size,) = struct.unpack(">I", self.buffer[1:5])
                if size > MAX_FRAME:
                    raise VmLost(f"the guest sent a frame of {size} bytes")
                if len(self.buffer) >= 5 + size:
                    payload = bytes(self.buffer[5 : 5 + size])
                    del self.buffer[: 5 + size]
                    return kind, payload
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer from the guest")
            with selectors.DefaultSelector() as waiting:
                waiting.register(self.ctl, selectors.EVENT_READ)
                if not waiting.select(min(remaining, 0.5)):
                    if self.process.poll() is not None:
                        raise VmLost("the virtual machine ended")
                    continue
            chunk = self.ctl.recv(1 << 16)
            if not chunk:
                raise VmLost("the virtual machine ended")
            self.buffer += chunk


def guest_env(profile: Profile) -> dict[str, str]:
    """The command's environment, as the one-shot VM gives it (`vmlaunch.run_archive`)."""
    path = vmlaunch.GUEST_PATH
    if profile.environment is not None:
        path = f"{bwrap.ENV}/bin:{path}"
    env = {"PATH": path, "HOME": bwrap.SANDBOX_TMP, "LANG": "C.UTF-8", **profile.env}
    if profile.egress_socket is not None:
        for name in vmlaunch.PROXY_VARIABLES:
            env[name] = vmlaunch._guest_proxy(env.get(name))
    return env


def service_env(profile: Profile) -> dict[str, str]:
    """A service's environment: the command's, without the run's token. A service outlives the
    command that started it, and so that command's token: what it needs of one comes with each
    command (the browser's: with each page)."""
    env = guest_env(profile)
    return {
        name: value
        for name, value in env.items()
        if name.lower() not in SECRET_VARIABLES and name != "AGENTOS_RUN_TOKEN"
    }


def _report(payload: bytes) -> dict[str, Any]:
    if len(payload) > MAX_REPORT:
        raise VmLost("the guest's report is too long")
    try:
        value = json.loads(payload)
    except ValueError:
        raise VmLost("the guest's report is not JSON") from None
    if not isinstance(value, dict):
        raise VmLost("the guest's report is not an object")
    return value


def _pid1(info_read: int) -> int | None:
    """A pidfd of bubblewrap's pid 1, from its --info-fd (written as soon as it exists)."""
    kept = b""
    deadline = time.monotonic() + INFO_SECONDS
    with selectors.DefaultSelector() as waiting:
        waiting.register(info_read, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not waiting.select(deadline - time.monotonic()):
                break
            chunk = os.read(info_read, 4096)
            if not chunk:
                break
            kept += chunk
            with contextlib.suppress(ValueError, KeyError, TypeError):
                child = int(json.loads(kept)["child-pid"])
                with contextlib.suppress(ProcessLookupError):
                    return os.pidfd_open(child)
                return None
    return None
