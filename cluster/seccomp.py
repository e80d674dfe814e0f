"""The level-1 sandbox's seccomp filter: a BPF program that bubblewrap loads (`--seccomp FD`) just
before it runs the command.

Default ALLOW, EPERM for the calls an agent's shell never needs and that widen the kernel surface
or lead out of the sandbox: namespaces, mounts, tracing, BPF, keyrings, io_uring, modules. The
namespaces bubblewrap built stay the only ones: `unshare`/`setns` and `clone` with a namespace flag
fail, and `clone3` (whose flags sit in memory a filter cannot read) answers ENOSYS, which makes
glibc fall back to `clone`. Built with pyseccomp (ctypes over the system's libseccomp2).
"""

from __future__ import annotations

import errno
import functools
import os

import pyseccomp

# Fails with EPERM. Names libseccomp does not know on this machine are skipped (older kernels
# lack the newer calls, so there is nothing to block).
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "unshare",
    "setns",
    "pivot_root",
    "chroot",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
)

# clone(2)'s first argument carries these; CLONE_NEWTIME exists only for clone3 and unshare.
CLONE_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)


def build() -> pyseccomp.SyscallFilter:
    flt = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in DENIED:
        if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) >= 0:
            flt.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    # One rule per flag: rules on the same call are OR-ed, the comparisons of one rule AND-ed.
    for flag in CLONE_NAMESPACE_FLAGS:
        flt.add_rule(
            pyseccomp.ERRNO(errno.EPERM), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag)
        )
    if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, "clone3") >= 0:
        flt.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    return flt


@functools.cache
def bpf() -> bytes:
    """The compiled filter, built once per process (each run gets its own copy in a memfd)."""
    fd = os.memfd_create("agentos-seccomp")
    with os.fdopen(fd, "w+b") as file:
        build().export_bpf(file)
        file.seek(0)
        return file.read()
