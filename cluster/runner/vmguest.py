"""The command server of a warm level-2 VM: the guest's pid 1 once its init has set the guest up
(`vmimage.INIT` execs it when the per-run archive says WARM=1). Runs as guest root from the
per-run archive (root-only, 0600); the host's python3 over 9p runs it. Never imported on the
host: `vmwarm` ships this file's text.

It reads requests from the `ctl` virtio serial port (the host wrote them: trusted) and writes
frames back on the same port. One command at a time. Each command runs as the request's uid and
gid with no_new_privs, no capabilities (an empty bounding set, no inheritable ones), its rlimits,
in /workspace, with the request's environment only. When it exits, or when the host asks for a
kill, every process of that uid is killed (what it left running in the background too, as the
one-shot init's `kill -9 -1` does), its output drained, /tmp and /dev/shm emptied, then the exit
frame sent: nothing of one command survives into the next but the worktree.

The one exception the host asks for: a command that names a service (`{"service": {"argv",
"env", "cpu_seconds"}}`, a run's browser) has it started first, unless it already runs: forked
as the command's uid with the same drops and rlimits (its own CPU budget, for its whole life), in
a session of its own, its output discarded, its home SERVICE_HOME (spared when /tmp is emptied).
The kill at a command's end spares that session (a command cannot join it: setpgid stays within a
session); a kill request from the host does not, nor does a command naming no service or another
one. A service that died is started afresh by the next command naming it.

Frames to the host, each `<kind:1><length:4 big-endian><payload>`, payload at most MAX_FRAME:
R ready {"boot_id"}, O stdout bytes, E stderr bytes, X exit {"code", "oom", "seconds"}.
Requests from the host, each `<length:4><JSON>`: {"op": "run", ...} or {"op": "kill"}.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import selectors
import shutil
import signal
import struct
import time
from pathlib import Path
from typing import Any

PORT = "/run/agentos/port-ctl"
MAX_FRAME = 1 << 16
KILL_ROUNDS = 50  # sweeps of /proc until the uid has no process left (a fork bomb races us)
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
LAST_CAP = 63
SCRATCH = ("/tmp", "/dev/shm")  # noqa: S108 (the guest's own tmpfs, emptied between commands)
SERVICE_HOME = "/tmp/.service"  # noqa: S108 (the browser driver's own constant too)


def frame(port: int, kind: bytes, payload: bytes) -> None:
    for start in range(0, max(len(payload), 1), MAX_FRAME):
        part = payload[start : start + MAX_FRAME]
        data = kind + struct.pack(">I", len(part)) + part
        while data:
            data = data[os.write(port, data) :]


def read_exactly(port: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(port, size - len(data))
        if not chunk:
            raise EOFError("the host closed the control port")
        data += chunk
    return data


def oom_kills() -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def kill_uid(uid: int, spare: int | None = None) -> None:
    """SIGKILL every process whose real uid is `uid` (but those of session `spare`), until none
    is left."""
    for _ in range(KILL_ROUNDS):
        found = False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    if spare is not None and os.getsid(int(entry.name)) == spare:
                        continue
                    found = True
                    os.kill(int(entry.name), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


def empty_scratch(spare: str = "") -> None:
    for top in SCRATCH:
        for entry in Path(top).iterdir():
            if str(entry) == spare:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()


def child(request: dict[str, Any], stdin: int, out: int, err: int) -> None:
    """In the forked child: become the command. Never returns."""
    try:
        os.setsid()
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.chdir("/workspace")
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in range(LAST_CAP + 1):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        uid, gid = int(request["uid"]), int(request["gid"])
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        limits = request["limits"]
        for which, value in (
            (resource.RLIMIT_NPROC, limits["processes"]),
            (resource.RLIMIT_FSIZE, limits["file_bytes"]),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(which, (value, value))
        cpu = limits["cpu_seconds"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        os.setresuid(uid, uid, uid)
        # capset(v3, this process): setresuid cleared the permitted and effective sets; the
        # inheritable one too now.
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
            os._exit(126)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            os._exit(126)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.closerange(3, 65536)
        argv = request["argv"]
        os.execvpe(argv[0], argv, request["env"])  # noqa: S606 (the command, as its uid)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.write(2, f"{request['argv'][0]}: {error.strerror}\n".encode())
        os._exit(127 if isinstance(error, FileNotFoundError) else 126)
    os._exit(126)


class Server:
    def __init__(self) -> None:
        self.port = os.open(PORT, os.O_RDWR)
        self.selector = selectors.DefaultSelector()
        wake_read, self.wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wake)
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        self.selector.register(wake_read, selectors.EVENT_READ, "wake")
        self.selector.register(self.port, selectors.EVENT_READ, "ctl")
        self.service: dict[str, Any] | None = None  # {"pid", "uid", "argv"} while it runs

    def serve(self) -> None:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        frame(self.port, b"R", json.dumps({"boot_id": boot_id}).encode())
        while True:
            request = self.request()
            if request.get("op") == "run":
                self.run(request)

    def request(self) -> dict[str, Any]:
        (size,) = struct.unpack(">I", read_exactly(self.port, 4))
        value = json.loads(read_exactly(self.port, size))
        return value if isinstance(value, dict) else {}

    def run(self, request: dict[str, Any]) -> None:
        """1. Fork the command. 2. Stream its output until it exits and its pipes close (a kill
        request from the host kills the uid meanwhile). 3. Kill what is left of the uid, empty
        the scratch directories, send the exit frame."""
        uid = int(request["uid"])
        self.keep_service(request)
        oom_before = oom_kills()
        stdin = os.memfd_create("stdin")
        os.write(stdin, bytes.fromhex(request.get("stdin", "")))
        os.lseek(stdin, 0, os.SEEK_SET)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe() if request.get("stderr_apart") else (-1, out_write)
        began = time.monotonic()
        pid = os.fork()
        if pid == 0:
            child(request, stdin, out_write, err_write)
        for fd in {stdin, out_write, err_write}:
            os.close(fd)
        streams = {out_read: b"O", **({err_read: b"E"} if err_read >= 0 else {})}
        for fd in streams:
            self.selector.register(fd, selectors.EVENT_READ, "output")
        code: int | None = None
        while streams or code is None:
            for key, _events in self.selector.select(1.0):
                if key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(key.fd, 512)
                elif key.data == "ctl":
                    if self.request().get("op") == "kill":
                        kill_uid(uid)  # the service too: a stopped command may be its fault
                else:
                    chunk = os.read(key.fd, MAX_FRAME)
                    if chunk:
                        frame(self.port, streams[key.fd], chunk)
                    else:
                        self.selector.unregister(key.fd)
                        os.close(key.fd)
                        del streams[key.fd]
            code = self.reap(pid, code)
            if code is not None and streams:
                kill_uid(uid, self.spared())  # its leftovers hold the pipes: the command is over
        seconds = time.monotonic() - began
        kill_uid(uid, self.spared())
        self.reap(pid, code)
        if self.service is None:
            kill_uid(uid)  # a service that died meanwhile: what it left too
        empty_scratch(SERVICE_HOME if self.service is not None else "")
        report = {"code": code, "oom": oom_kills() - oom_before, "seconds": round(seconds, 4)}
        frame(self.port, b"X", json.dumps(report).encode())

    def reap(self, pid: int, code: int | None) -> int | None:
        """Reap every exited child (pid 1 inherits the command's orphans); the command's code."""
        while True:
            try:
                found, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return code
            if found == 0:
                return code
            if self.service is not None and found == self.service["pid"]:
                self.service = None
            if found == pid:
                signalled = os.WIFSIGNALED(status)
                code = 128 + os.WTERMSIG(status) if signalled else os.WEXITSTATUS(status)

    def spared(self) -> int | None:
        return None if self.service is None else int(self.service["pid"])

    def keep_service(self, request: dict[str, Any]) -> None:
        """Before a command: the service it names running (started if not), any other gone."""
        wanted = request.get("service")
        self.reap(-1, None)  # a service that died since
        current = self.service
        same = current is not None and wanted is not None and current["argv"] == wanted["argv"]
        if same and current is not None and current["uid"] == request["uid"]:
            return
        if current is not None:
            kill_uid(int(current["uid"]))
            self.service = None
            self.reap(-1, None)
        home = Path(SERVICE_HOME)
        if home.is_dir() and not home.is_symlink():  # its files, whether it ended or was ended
            shutil.rmtree(home, ignore_errors=True)
        if wanted is None:
            return
        kill_uid(int(request["uid"]))  # what a dead service left
        self.reap(-1, None)
        try:
            with contextlib.suppress(FileNotFoundError):
                home.unlink()
            home.mkdir(mode=0o700)  # root's until chowned: no command runs meanwhile
            os.chown(home, int(request["uid"]), int(request["gid"]))
        except OSError:
            return  # no service, no home: the command goes without (the browser renders alone)
        env = {**wanted["env"], "HOME": SERVICE_HOME, "TMPDIR": SERVICE_HOME}
        limits = {**request["limits"], "cpu_seconds": int(wanted["cpu_seconds"])}
        service = {**request, "argv": wanted["argv"], "env": env, "limits": limits}
        null = os.open(os.devnull, os.O_RDWR)
        pid = os.fork()
        if pid == 0:
            child(service, null, null, null)
        os.close(null)
        self.service = {"pid": pid, "uid": request["uid"], "argv": wanted["argv"]}


if __name__ == "__main__":
    Server().serve()
