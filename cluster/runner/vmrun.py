"""Running one level-2 VM: QEMU started in bubblewrap as the profile's uid, its serial ports read
into pipes, killed at the boot deadline, the wall clock, a stop or past the disk quota; the
protocol's sandbox result once it is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.runner import bwrap, vmlaunch
from cluster.runner.protocol import Limits, Profile
from cluster.runner.watch import DiskWatch

CONSOLE_KEPT = 16 << 10  # the tail of the guest console kept to explain a failed boot
INFO_SECONDS = 2.0  # how long a kill waits for bubblewrap to name its pid 1
DRAIN_SECONDS = 5.0  # after QEMU exits, how long its pipes may take to close


class VmUnavailable(RuntimeError):
    """Level 2 cannot run here, or this VM could not boot; the message says why."""


@dataclass
class _Pipes:
    """The host ends we read, and the write ends QEMU gets (each owned by the profile's uid, so
    QEMU can open it again through /proc/self/fd)."""

    read: dict[str, int]
    write: dict[str, int]

    @classmethod
    def open(cls, names: list[str], uid: int, gid: int) -> _Pipes:
        pipes = cls({}, {})
        for name in names:
            read, write = os.pipe2(os.O_CLOEXEC)
            pipes.read[name], pipes.write[name] = read, write
            os.fchown(write, uid, gid)
        return pipes

    def close_write(self) -> None:
        for fd in self.write.values():
            os.close(fd)
        self.write.clear()

    def close(self) -> None:
        self.close_write()
        for fd in self.read.values():
            os.close(fd)
        self.read.clear()


def boot(
    node: vmlaunch.Node,
    profile: Profile,
    stopping: threading.Event | None,
    boot_seconds: float,
    env_dir: Path | None = None,
) -> dict[str, Any]:
    """1. Build the per-run initramfs (a memfd). 2. Start QEMU in bubblewrap as the profile's
    uid. 3. Pump the ports until the guest's init reports the exit status and QEMU is gone,
    killing it at the boot deadline, the wall clock, a stop or past the disk quota."""
    workdir = profile.workdir
    git = vmlaunch.git_mode(workdir, profile.writable) if workdir is not None else "none"
    archive = vmlaunch.run_archive(profile, git, environment=env_dir is not None)
    # Close-on-exec like every descriptor here: only QEMU gets them (pass_fds), never a sandbox
    # that another thread of the runner starts meanwhile (the archive holds this run's stdin).
    initrd = os.memfd_create("agentos-vm-initrd")
    kernel = os.open(node.image.kernel, os.O_RDONLY)
    names = ["out", "status", "console"] + (["err"] if profile.stderr_apart else [])
    pipes = _Pipes.open(names, profile.uid, profile.gid)
    info_read, info_write = os.pipe()
    process: subprocess.Popen[bytes] | None = None
    disk = DiskWatch(workdir or Path(), profile.limits.disk_bytes)
    try:
        with Path(node.image.initrd).open("rb") as base, os.fdopen(os.dup(initrd), "wb") as out:
            shutil.copyfileobj(base, out)
        os.lseek(initrd, 0, os.SEEK_END)
        os.write(initrd, archive)
        command = vmlaunch.bwrap_command(node, profile, env_dir, info_write)
        command += vmlaunch.qemu_command(node, profile, git, kernel, initrd, pipes.write)
        if env_dir is not None:
            command += vmlaunch.share("env", bwrap.ENV, readonly=True)
        drop: dict[str, Any] = {}
        if os.geteuid() == 0:
            kvm_group = [Path("/dev/kvm").stat().st_gid] if node.accelerator == "kvm" else []
            drop = {"user": profile.uid, "group": profile.gid, "extra_groups": kvm_group}
        started = time.monotonic()
        process = subprocess.Popen(  # noqa: S603 (fixed programs; the guest's argv is data)
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd="/",
            pass_fds=[info_write, initrd, kernel, *pipes.write.values()],
            start_new_session=True,
            **drop,
        )
        os.close(info_write)
        info_write = -1
        pipes.close_write()
        if workdir is not None:
            disk.start()
        watch = _Watch(process, pipes, info_read, profile.limits, stopping, disk, started)
        return watch.run(boot_seconds)
    finally:
        disk.stop()
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process is not None and process.stderr is not None:
            process.stderr.close()
        for fd in (initrd, kernel, info_read, info_write):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        pipes.close()


class _Watch:
    """Reads QEMU's pipes and decides when to kill it; `run` returns once QEMU is gone."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        pipes: _Pipes,
        info_fd: int,
        limits: Limits,
        stopping: threading.Event | None,
        disk: DiskWatch,
        started: float,
    ) -> None:
        self.process = process
        self.limits = limits
        self.stopping = stopping
        self.disk = disk
        self.started = started
        self.kept: dict[str, bytearray] = {name: bytearray() for name in pipes.read}
        self.kept["qemu"] = bytearray()
        self.dropped = 0
        self.selector = selectors.DefaultSelector()
        assert process.stderr is not None  # noqa: S101 (started with stderr=PIPE)
        readers = {**pipes.read, "qemu": process.stderr.fileno(), "info": info_fd}
        for name, fd in readers.items():
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, name)
        self.pidfd: int | None = None
        self.command_started: float | None = None
        self.killed: str | None = None
        self.killed_at = 0.0
        self.reason = ""

    def run(self, boot_seconds: float) -> dict[str, Any]:
        boot_deadline = self.started + boot_seconds
        exited_at: float | None = None
        while self.selector.get_map():
            now = time.monotonic()
            if exited_at is None and self.process.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > DRAIN_SECONDS:
                break  # something still holds a pipe: QEMU is gone, stop waiting
            if self.killed is None:
                self.check(now, boot_deadline)
            elif self.pidfd is None and now - self.killed_at > INFO_SECONDS:
                self.kill_group()  # bubblewrap never said who its pid 1 is
            for key, _events in self.selector.select(0.05):
                self.read(key.fd, str(key.data))
        self.kill(final=True)
        try:
            self.process.wait(DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill_group()
            self.process.wait()
        if self.pidfd is not None:
            # bwrap's pid 1 exits only once its namespace (QEMU, socat) is gone.
            with selectors.DefaultSelector() as waiting:
                waiting.register(self.pidfd, selectors.EVENT_READ)
                waiting.select(DRAIN_SECONDS)
            os.close(self.pidfd)
        self.selector.close()
        return self.result(boot_seconds)

    def check(self, now: float, boot_deadline: float) -> None:
        if self.stopping is not None and self.stopping.is_set():
            self.killed = "cancelled"
        elif self.command_started is None and now >= boot_deadline:
            self.killed = "boot"
        elif self.command_started is not None and (
            now >= self.command_started + self.limits.wall_seconds
        ):
            self.killed = "timeout"
        elif self.disk.over.is_set():
            self.killed = "disk"
            self.reason = f"the workspace grew past {self.limits.disk_bytes // 2**20} MB"
        else:
            return
        self.killed_at = now
        self.kill()

    def kill(self, *, final: bool = False) -> None:
        """Kill bubblewrap's pid 1 (the namespace goes with it: QEMU, socat) and let bubblewrap
        outside reap it and exit: killed together, pid 1 would be left to the host's init, which
        may never reap it. Until bubblewrap names pid 1 (milliseconds after it starts) the kill
        waits for it (`note_info` kills then); the whole process group only if it never does."""
        if self.pidfd is None:
            if final:
                self.kill_group()
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def kill_group(self) -> None:
        if self.process.returncode is None:  # not reaped yet, so the group id is still ours
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)

    def read(self, fd: int, name: str) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.selector.unregister(fd)
            return
        kept = self.kept.get(name)
        if name == "info":
            self.note_info(chunk)
        elif name in ("out", "err"):
            assert kept is not None  # noqa: S101 (registered with a buffer)
            room = max(
                self.limits.output_bytes - len(self.kept["out"]) - len(self.kept.get("err", b"")), 0
            )
            kept += chunk[:room]
            self.dropped += max(len(chunk) - room, 0)
        elif kept is not None:
            # The status and QEMU's own messages are small; the console's tail is kept.
            kept += chunk
            if name == "console" and len(kept) > CONSOLE_KEPT:
                del kept[: len(kept) - CONSOLE_KEPT]
            if name == "status" and self.command_started is None and b"start " in kept:
                self.command_started = time.monotonic()

    def note_info(self, chunk: bytes) -> None:
        self.kept.setdefault("info", bytearray()).extend(chunk)
        try:
            child = int(json.loads(self.kept["info"])["child-pid"])
        except ValueError:
            return  # not all of it yet
        except (KeyError, TypeError):
            return
        with contextlib.suppress(ProcessLookupError):
            self.pidfd = os.pidfd_open(child)
        if self.killed is not None:
            self.kill()

    def status(self) -> tuple[int | None, int]:
        """The exit code and the OOM kills the guest's init reported, if it did."""
        for line in bytes(self.kept["status"]).decode("ascii", "replace").splitlines():
            words = line.split()
            if len(words) == 4 and words[0] == "exit" and words[2] == "oom":
                with contextlib.suppress(ValueError):
                    return int(words[1]), int(words[3])
        return None, 0

    def result(self, boot_seconds: float) -> dict[str, Any]:
        code, oom = self.status()
        finished = time.monotonic()
        if self.killed == "boot" or (self.killed is None and self.command_started is None):
            console = self.kept["console"].decode("utf-8", "replace").strip()[-2000:]
            qemu = self.kept["qemu"].decode("utf-8", "replace").strip()[-2000:]
            what = f"did not boot within {boot_seconds:g} s" if self.killed else "stopped early"
            raise VmUnavailable(
                f"the virtual machine {what} (QEMU: {qemu or 'nothing'}; console: "
                f"{console or 'nothing'})"
            )
        if self.killed is None and code is None:
            raise VmUnavailable(
                "the virtual machine ended without an exit status (QEMU: "
                + (self.kept["qemu"].decode("utf-8", "replace").strip()[-2000:] or "nothing")
                + ")"
            )
        duration_ms = int((finished - self.started) * 1000)
        boot = (self.command_started or finished) - self.started
        return {
            "exit_code": None if self.killed else code,
            "output": self.kept["out"].decode("utf-8", errors="replace"),
            "errors": self.kept.get("err", bytearray()).decode("utf-8", errors="replace"),
            "truncated": self.dropped > 0,
            "truncated_bytes": self.dropped,
            "killed": self.killed or ("memory" if oom else None),
            "reason": self.reason,
            "out_of_memory": oom,
            "memory_limit": self.limits.memory_bytes,
            "seconds": duration_ms / 1000,
            "duration_ms": duration_ms,
            "boot_seconds": round(boot, 3),
        }
