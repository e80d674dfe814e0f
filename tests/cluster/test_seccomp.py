"""The seccomp filter, from inside the real sandbox: each denied call and socket family refused,
ordinary programs unaffected.

Many denied calls fail without capabilities anyway (EPERM from the kernel), so a test that only
saw EPERM could not tell the filter's refusal from the kernel's. The per-call test runs the same
rules with an errno the kernel never gives for them (ENOTRECOVERABLE); the production filter's
EPERM is shown on calls the kernel itself would allow."""

from __future__ import annotations

import dataclasses
import errno
import socket
import sys
from pathlib import Path

import pyseccomp
import pytest

from cluster import sandbox, seccomp
from tests.cluster.helpers import python, run, sh

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="level 1 is Linux bubblewrap")

MARK = errno.ENOTRECOVERABLE

# Calls each "name=number" given with zero arguments; prints "<name> <errno name>" or "<name> ok".
CALL_PROBE = """
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for spec in sys.argv[1:]:
    name, number = spec.split("=")
    result = libc.syscall(int(number), 0, 0, 0, 0, 0, 0)
    print(name, "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()], flush=True)
"""

# Opens a socket of each family; prints "<family> <errno name>" or "<family> ok".
FAMILY_PROBE = """
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
def report(name, result):
    print(name, "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()], flush=True)
families = {
    "AF_UNIX": (1, socket.SOCK_STREAM), "AF_INET": (2, socket.SOCK_STREAM),
    "AF_INET6": (10, socket.SOCK_STREAM), "AF_UNSPEC": (0, socket.SOCK_STREAM),
    "AF_AX25": (3, socket.SOCK_SEQPACKET), "AF_NETLINK": (16, socket.SOCK_RAW),
    "AF_PACKET": (17, socket.SOCK_DGRAM), "AF_BLUETOOTH": (31, socket.SOCK_STREAM),
    "AF_ALG": (38, socket.SOCK_SEQPACKET), "AF_VSOCK": (40, socket.SOCK_STREAM),
    "AF_VSOCK+high bits": ((1 << 32) | 40, socket.SOCK_STREAM),
    "AF_INET+high bits": ((1 << 32) | 2, socket.SOCK_STREAM),
}
for name, (family, kind) in families.items():
    report(f"socket {name}", libc.syscall(41, ctypes.c_long(family), kind, 0))
pair = (ctypes.c_int * 2)()
for name, family in (("AF_UNIX", 1), ("AF_INET", 2), ("AF_VSOCK", 40), ("AF_NETLINK", 16)):
    report(f"socketpair {name}", libc.syscall(53, family, socket.SOCK_STREAM, 0, pair))
"""

PERSONALITY_PROBE = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for value in (0, 0x0040000, 0x0008, 0x0020000, 0x0400000, 0xffffffff, (1 << 32)):
    result = libc.syscall(135, ctypes.c_ulong(value))
    print(hex(value), "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()], flush=True)
"""

# Calls the kernel would allow an unprivileged process: EPERM here is the filter's own.
ALLOWED_BY_THE_KERNEL_PROBE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def report(name, result):
    print(name, "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()], flush=True)
pid = os.getpid()
report("kcmp", libc.syscall(312, pid, pid, 0, 0, 0))  # KCMP_FILE of fd 0 with itself
report("get_mempolicy", libc.syscall(239, None, None, 0, None, 0))
report("mbind", libc.syscall(237, None, 0, 0, None, 0, 0))
report("set_mempolicy", libc.syscall(238, 0, None, 0))  # MPOL_DEFAULT
report("move_pages", libc.syscall(279, 0, 0, None, None, None, 0))
report("modify_ldt", libc.syscall(154, 0, None, 0))  # read 0 bytes of the LDT
report("pidfd_getfd", libc.syscall(438, os.pidfd_open(pid), 0, 0))
report("personality", libc.syscall(135, 0x0040000))  # ADDR_NO_RANDOMIZE
"""

ORDINARY_PROBE = """
import socket, subprocess
with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    with socket.create_connection(server.getsockname(), timeout=5) as client:
        client.sendall(b"ping")
        connection, _ = server.accept()
        print("tcp", connection.recv(4).decode())
        connection.close()
with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as udp6:
    udp6.bind(("::1", 0))
    print("udp6 bound")
left, right = socket.socketpair()
left.sendall(b"pong")
print("unix", right.recv(4).decode())
# AI_ADDRCONFIG makes glibc probe the interfaces over AF_NETLINK, refused: it must carry on.
found = socket.getaddrinfo("localhost", 80, flags=socket.AI_ADDRCONFIG)
print("resolve", sorted({info[4][0] for info in found}))
shell = subprocess.run(["sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True)
print("sh", shell.stdout.strip())
"""


@pytest.fixture
def marked_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox with the same rules answering MARK instead of EPERM."""
    tools = sandbox._ready()
    monkeypatch.setattr(sandbox, "_tools", dataclasses.replace(tools, seccomp=seccomp.bpf(MARK)))


def known(name: str) -> int:
    return int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name))


@pytest.mark.skipif(known("socket") != 41, reason="the probes use x86_64 numbers")
def test_it_refuses_every_denied_call_inside_the_sandbox(
    workdir: Path, marked_filter: None
) -> None:
    names = [name for name in seccomp.DENIED if known(name) >= 0]
    assert {"modify_ldt", "pidfd_getfd", "kcmp", "mbind", "set_mempolicy", "move_pages"} <= set(
        names
    )

    result = python(CALL_PROBE, *(f"{name}={known(name)}" for name in names), workdir=workdir)

    assert result.output.splitlines() == [f"{name} ENOTRECOVERABLE" for name in names], (
        result.summary()
    )


@pytest.mark.skipif(known("socket") != 41, reason="the probes use x86_64 numbers")
def test_it_refuses_with_eperm_what_the_kernel_would_allow(workdir: Path) -> None:
    result = python(ALLOWED_BY_THE_KERNEL_PROBE, workdir=workdir)

    assert result.output.splitlines() == [
        "kcmp EPERM",
        "get_mempolicy EPERM",
        "mbind EPERM",
        "set_mempolicy EPERM",
        "move_pages EPERM",
        "modify_ldt EPERM",
        "pidfd_getfd EPERM",
        "personality EPERM",
    ], result.summary()


@pytest.mark.skipif(known("socket") != 41, reason="the probes use x86_64 numbers")
def test_it_allows_only_unix_and_ip_socket_families(workdir: Path) -> None:
    result = python(FAMILY_PROBE, workdir=workdir)

    assert result.output.splitlines() == [
        "socket AF_UNIX ok",
        "socket AF_INET ok",
        "socket AF_INET6 ok",
        "socket AF_UNSPEC EAFNOSUPPORT",
        "socket AF_AX25 EAFNOSUPPORT",
        "socket AF_NETLINK EAFNOSUPPORT",
        "socket AF_PACKET EAFNOSUPPORT",
        "socket AF_BLUETOOTH EAFNOSUPPORT",
        "socket AF_ALG EAFNOSUPPORT",
        "socket AF_VSOCK EAFNOSUPPORT",
        "socket AF_VSOCK+high bits EAFNOSUPPORT",
        "socket AF_INET+high bits EAFNOSUPPORT",
        "socketpair AF_UNIX ok",
        "socketpair AF_INET ENOTSUP",  # the kernel's own answer: no pairs of IP sockets
        "socketpair AF_VSOCK EAFNOSUPPORT",
        "socketpair AF_NETLINK EAFNOSUPPORT",
    ], result.summary()


@pytest.mark.skipif(known("socket") != 41, reason="the probes use x86_64 numbers")
def test_it_allows_only_the_linux_personality(workdir: Path) -> None:
    result = python(PERSONALITY_PROBE, workdir=workdir)

    assert result.output.splitlines() == [
        "0x0 ok",
        "0x40000 EPERM",  # ADDR_NO_RANDOMIZE
        "0x8 EPERM",  # PER_LINUX32
        "0x20000 EPERM",  # UNAME26
        "0x400000 EPERM",  # READ_IMPLIES_EXEC
        "0xffffffff EPERM",  # the query
        "0x100000000 EPERM",  # PER_LINUX in the low bits, the rest set
    ], result.summary()


def test_it_still_runs_ordinary_programs(plain_repo: Path) -> None:
    result = python(ORDINARY_PROBE, workdir=plain_repo)
    git = run(["git", "status", "--short", "--branch"], plain_repo)
    shell = sh("ls / | head -3; uname -s; echo done", plain_repo)

    assert result.output.splitlines() == [
        "tcp ping",
        "udp6 bound",
        "unix pong",
        "resolve ['127.0.0.1']",
        "sh 42",
    ], result.summary()
    assert (git.exit_code, git.output) == (0, "## main\n"), git.summary()
    assert shell.output.splitlines()[-2:] == ["Linux", "done"]


def test_it_keeps_the_host_free_of_the_filter() -> None:
    # The filter goes to bwrap as bytes: building it never loads it into this process.
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW) as netlink:
        assert netlink.fileno() >= 0
    assert seccomp.bpf() != seccomp.bpf(MARK)


# Every x86_64 call number up to the highest this kernel has, and past it: each one outside the
# allow-list must answer MARK (named as denied) or ENOSYS (not named at all), never the kernel's.
@pytest.mark.skipif(known("socket") != 41, reason="the probes use x86_64 numbers")
def test_it_answers_enosys_for_every_call_not_on_the_allow_list(
    workdir: Path, marked_filter: None
) -> None:
    allowed = {known(name) for name in seccomp.ALLOWED if known(name) >= 0}
    conditional = {known(name) for name in seccomp.CONDITIONAL}
    denied = {known(name) for name in seccomp.DENIED if known(name) >= 0}
    # uretprobe (335, kernel 6.11) and uprobe (336, 6.18): the kernel runs them before any filter
    # (they only act from its own probe trampolines: outside one, SIGILL and ENXIO).
    unfiltered = {335, 336}
    refused = [n for n in range(1000) if n not in allowed | conditional | unfiltered]
    assert {457, 458, 467, 999} <= set(refused)  # statmount, listmount, open_tree_attr, none

    result = python(CALL_PROBE, *(f"{number}={number}" for number in refused), workdir=workdir)

    expected = [
        f"{number} {'ENOTRECOVERABLE' if number in denied else 'ENOSYS'}" for number in refused
    ]
    assert result.output.splitlines() == expected, result.summary()


@pytest.mark.skipif(known("socket") != 41, reason="the probes use x86_64 numbers")
def test_it_answers_enosys_for_calls_newer_than_the_list(workdir: Path) -> None:
    # The kernel here has these (6.8 and later): outside the sandbox each answers EFAULT to a
    # null pointer. None is in Docker's profile; an allow-list refuses them without naming them.
    calls = ["statmount=457", "listmount=458", "open_tree_attr=467", "unassigned=1000"]

    result = python(CALL_PROBE, *calls, workdir=workdir)

    assert result.output.splitlines() == [
        "statmount ENOSYS",
        "listmount ENOSYS",
        "open_tree_attr ENOSYS",
        "unassigned ENOSYS",
    ], result.summary()


def test_it_keeps_the_allow_list_apart_from_what_it_refuses() -> None:
    # A name both allowed and denied would make libseccomp refuse the filter (or, worse, one rule
    # would silently win); each denied call and each conditional one stays off the plain list.
    assert not set(seccomp.ALLOWED) & set(seccomp.DENIED)
    assert not set(seccomp.ALLOWED) & set(seccomp.CONDITIONAL)
    assert {"listmount", "statmount", "open_tree_attr"}.isdisjoint(seccomp.ALLOWED)
    assert {"read", "execve", "openat", "clone", "socket"} <= set(seccomp.ALLOWED) | set(
        seccomp.CONDITIONAL
    )


def test_it_still_runs_the_tools_an_agent_uses(workdir: Path) -> None:
    # Each under the allow-list: node (libuv, threads, its own io_uring probe falls back), rg
    # (threads, mmap), git writing objects, tar and gzip through a pipe, a thread pool in python.
    script = """
set -e
git init --quiet --initial-branch=main repo && cd repo
git config user.email a@b && git config user.name a
echo 'needle here' > notes.txt && git add notes.txt && git commit --quiet -m first
git log --oneline | wc -l
rg --no-heading needle .
node -e 'require("fs").promises.readFile("notes.txt", "utf8").then(t => console.log(t.trim()))'
node -e 'const {Worker} = require("worker_threads"); new Worker("process.exit(0)", {eval: true})
  .on("exit", c => console.log("worker", c))'
tar -cf - notes.txt | gzip | gzip -d | tar -tf -
python3 -c 'import concurrent.futures as f; print(sum(f.ThreadPoolExecutor(4).map(abs, [-1, -2])))'
chmod 600 notes.txt && stat -c %a notes.txt
"""
    result = sh(script, workdir)

    assert result.output.splitlines() == [
        "1",
        "./notes.txt:needle here",
        "needle here",
        "worker 0",
        "notes.txt",
        "3",
        "600",
    ], result.summary()
