"""Watching one sandboxed command from the host: its output, its clocks, its workspace's size.

`cluster.runner.bwrap` starts the command and hands it to `Watcher`, which returns an
`Outcome` once the command and everything it started are gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# How often the output loop looks at `stopping`, the wall clock and the disk watcher.
POLL_SECONDS = 0.05
# After a kill, how long to wait for the pipe to close and the pid namespace to be gone.
TEARDOWN_SECONDS = 5.0
# The disk watcher walks the workspace again after max(DISK_MIN_INTERVAL, DISK_COST_FACTOR x the
# last walk's duration), at most DISK_MAX_INTERVAL: about 10 % of one core for a huge tree, four
# looks a second for an ordinary one.
DISK_MIN_INTERVAL = 0.25
DISK_COST_FACTOR = 9
DISK_MAX_INTERVAL = 30.0


@dataclass(frozen=True)
class Watch:
    """What the watcher enforces besides the command's own exit."""

    wall_seconds: float
    output_bytes: int
    stopping: threading.Event | None
    stdin: bytes
    workspace: Path | None  # None: nothing to measure (a step without a worktree)
    disk_bytes: int


@dataclass(frozen=True)
class Outcome:
    code: int | None  # None when we killed it
    output: bytes
    errors: bytes
    dropped: int
    timed_out: bool
    cancelled: bool
    killed: str  # why we killed it, for other reasons than the clock or a cancellation
    duration_ms: int


class DiskWatch:
    """Measures the workspace's size (each file's apparent or allocated size, whichever is
    larger; hard links once) in a thread and says when it passed the quota.

    Why a watcher rather than a size-capped filesystem image: the worktree stays a plain directory
    the host's tools and git read without mounting anything (a loop-mounted image needs root, a
    free loop device and an fsck-able image per run, and hides the tree from the host while the
    run lives). The price is a window between two walks: a command writing fast can go past the
    quota by what it writes in one interval (RLIMIT_FSIZE bounds each file, the host's free space
    the whole) before it is killed. A sparse or compressed file counts by its apparent size: what
    git, a diff or a copy of the worktree reads is that, not the blocks the filesystem spent.
    Empty files and directories cost inodes, not bytes: an inode flood is not counted.
    """

    def __init__(self, workspace: Path, limit: int) -> None:
        self.workspace = workspace
        self.limit = limit
        self.over = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="sandbox-disk-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def loop(self) -> None:
        while not self.done.is_set():
            began = time.monotonic()
            if allocated_bytes(self.workspace, stop_above=self.limit) > self.limit:
                self.over.set()
                return
            cost = time.monotonic() - began
            self.done.wait(min(max(DISK_MIN_INTERVAL, DISK_COST_FACTOR * cost), DISK_MAX_INTERVAL))


def allocated_bytes(top: Path, stop_above: int | None = None) -> int:
    """The bytes of the tree at `top` (per inode, the larger of its apparent size and its
    allocated blocks, so a sparse file counts whole), never following a symlink: each directory is
    opened from its parent's descriptor with O_NOFOLLOW, so a directory swapped for a link
    mid-walk is not entered. Iterative (a tree thousands of levels deep is counted, not a
    RecursionError); a directory that cannot be opened (descriptors exhausted...) is counted
    for itself only. Stops counting once past `stop_above`."""
    seen: set[tuple[int, int]] = set()
    total = 0
    try:
        root = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    total = os.fstat(root).st_blocks * 512
    # Depth first: one open descriptor per level, with the subdirectories still to enter.
    stack: list[tuple[int, list[str]]] = []
    pending: tuple[int, list[str]] | None = (root, [])
    try:
        while pending is not None or stack:
            if pending is not None:
                fd, _ = pending
                subdirectories: list[str] = []
                with contextlib.suppress(OSError), os.scandir(fd) as entries:
                    for entry in entries:
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue  # gone meanwhile
                        if stat.S_ISDIR(info.st_mode):
                            subdirectories.append(entry.name)
                        elif info.st_nlink > 1:
                            key = (info.st_dev, info.st_ino)
                            if key in seen:
                                continue
                            seen.add(key)
                        total += max(info.st_size, info.st_blocks * 512)
                stack.append((fd, subdirectories))
                pending = None
                if stop_above is not None and total > stop_above:
                    break
            fd, subdirectories = stack[-1]
            if not subdirectories:
                os.close(fd)
                stack.pop()
                continue
            name = subdirectories.pop()
            with contextlib.suppress(OSError):
                child = os.open(
                    name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
                pending = (child, [])
    finally:
        for fd, _ in stack:
            os.close(fd)
        if pending is not None:
            os.close(pending[0])
    return total


class Watcher:
    """Pumps stdin and the output of one sandboxed command and decides when to kill it.

    The command's stdout and stderr share one pipe, or have one each (`stderr_apart`). The first
    `output_bytes` of each are kept, the rest counted and read on so the command never blocks on a
    full pipe. bwrap's `--info-fd` names its pid 1 (host pid); a pidfd on it tells when the pid
    namespace, hence every process the command started, is gone: `run` returns only then.
    """

    def __init__(
        self, process: subprocess.Popen[bytes], info_fd: int, watch: Watch, started: float
    ) -> None:
        if process.stdout is None:
            raise ValueError("the process must have been started with stdout=PIPE")
        self.process = process
        self.watch = watch
        self.started = started
        self.deadline = started + watch.wall_seconds
        self.kept = {"out": bytearray(), "err": bytearray()}
        self.dropped = 0
        self.info = bytearray()
        self.pidfd: int | None = None
        self.killed_at: float | None = None
        self.timed_out = False
        self.cancelled = False
        self.killed = ""
        self.pending = memoryview(watch.stdin)
        self.selector = selectors.DefaultSelector()
        self.outputs = {process.stdout.fileno()}
        readers = [(process.stdout.fileno(), "out"), (info_fd, "info")]
        if process.stderr is not None:
            self.outputs.add(process.stderr.fileno())
            readers.append((process.stderr.fileno(), "err"))
        for fd, role in readers:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, role)
        if watch.stdin and process.stdin is not None:
            os.set_blocking(process.stdin.fileno(), False)
            self.selector.register(process.stdin.fileno(), selectors.EVENT_WRITE, "in")
        self.disk = DiskWatch(watch.workspace or Path(), watch.disk_bytes)
        if watch.workspace is not None:
            self.disk.start()

    def run(self) -> Outcome:
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
        return Outcome(
            code=None if self.killed_at is not None else (code if code >= 0 else 128 - code),
            output=bytes(self.kept["out"]),
            errors=bytes(self.kept["err"]),
            dropped=self.dropped,
            timed_out=self.timed_out,
            cancelled=self.cancelled,
            killed=self.killed,
            duration_ms=int((time.monotonic() - self.started) * 1000),
        )

    def output_open(self) -> bool:
        return any(fd in self.selector.get_map() for fd in self.outputs)

    def check_stop(self) -> None:
        if self.killed_at is not None:
            return
        if self.watch.stopping is not None and self.watch.stopping.is_set():
            self.cancelled = True
        elif time.monotonic() >= self.deadline:
            self.timed_out = True
        elif self.disk.over.is_set():
            self.killed = f"the workspace grew past {self.watch.disk_bytes // 2**20} MB"
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
                room = max(self.watch.output_bytes - len(kept), 0)
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
        self.disk.stop()
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
