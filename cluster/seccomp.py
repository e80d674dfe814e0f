"""The level-1 sandbox's seccomp filter: a BPF program that bubblewrap loads (`--seccomp FD`) just
before it runs the command.

Default ALLOW, and a deny list held against Docker's default profile for a container without
CAP_SYS_ADMIN (moby `profiles/seccomp/default_linux.go`): what it refuses, we refuse, plus what an
agent's shell never needs (tracing, chroot, io_uring, handles). Docker's profile is an allow-list
(unknown calls fail); ours names what fails, so a call newer than this list is allowed until added
here: the other layers (no capabilities in the user namespace, no network, read-only mounts, a
cgroup) stand behind it. Built with pyseccomp (ctypes over the system's libseccomp2).

The namespaces bubblewrap built stay the only ones: `unshare`/`setns` and `clone` with a namespace
flag fail, and `clone3` (whose flags sit in memory a filter cannot read) answers ENOSYS, which makes
glibc fall back to `clone`.
"""

from __future__ import annotations

import errno
import functools
import os

import pyseccomp

# Fail with EPERM (as in Docker), one group per reason. Names libseccomp does not know, or that do
# not exist on this architecture, are skipped (nothing to block).
DENIED_GROUPS: dict[str, tuple[str, ...]] = {
    # Out of the sandbox's mount and namespace view.
    "mounts and namespaces": (
        "mount",
        "umount",
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
    ),
    # Reading or steering other processes: memory, file descriptors, ordering of their objects.
    "other processes": (
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "process_madvise",
        "pidfd_getfd",
        "kcmp",
    ),
    # Code or hooks in the kernel itself.
    "kernel extension": (
        "bpf",
        "perf_event_open",
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
        "query_module",
        "get_kernel_syms",
        "kexec_load",
        "kexec_file_load",
        "lookup_dcookie",
        "fanotify_init",
    ),
    # Kernel keyrings are not namespaced: keys would outlive the sandbox and cross it.
    "keyrings": ("keyctl", "add_key", "request_key"),
    # A large, often-patched attack surface (Docker removed it from its default profile too).
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    # Pausing a kernel thread on a page fault widens races in kernel exploits.
    "userfaultfd": ("userfaultfd",),
    # The host's clock (time namespaces do not cover CLOCK_REALTIME).
    "clock": ("settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex"),
    # Whole-machine administration.
    "system administration": (
        "acct",
        "swapon",
        "swapoff",
        "reboot",
        "quotactl",
        "quotactl_fd",
        "sethostname",
        "setdomainname",
        "syslog",
        "vhangup",
        "_sysctl",
        "nfsservctl",
    ),
    # File handles address files by inode, around the mount view (open_by_handle_at was the
    # "shocker" container escape); name_to_handle_at is its first half.
    "file handles": ("name_to_handle_at", "open_by_handle_at"),
    # Hardware and legacy x86 interfaces, obsolete calls with a history of bugs.
    "hardware and legacy": (
        "iopl",
        "ioperm",
        "modify_ldt",
        "vm86",
        "vm86old",
        "uselib",
        "ustat",
        "sysfs",
    ),
    # NUMA placement: other tenants' memory locality, and a kernel surface builds never use.
    "NUMA": (
        "get_mempolicy",
        "set_mempolicy",
        "set_mempolicy_home_node",
        "mbind",
        "move_pages",
        "migrate_pages",
    ),
}
DENIED = tuple(name for group in DENIED_GROUPS.values() for name in group)

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

# The only socket families: local sockets and IP (the network namespace holds only loopback, and
# egress goes through a Unix socket). Everything else is a kernel surface the network namespace
# does not isolate (AF_VSOCK reaches the hypervisor's host, AF_ALG the crypto API, AF_NETLINK
# kernel subsystems, AF_PACKET raw frames...). Refused with EAFNOSUPPORT, what a kernel built
# without the family answers: programs already handle it and fall back (glibc's getaddrinfo
# probes AF_NETLINK and then assumes both IP versions), where EPERM reads as a hard failure.
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
SOCKET_FAMILY_ERRNO = errno.EAFNOSUPPORT

# personality(2): only PER_LINUX (0). Other values turn off ASLR (ADDR_NO_RANDOMIZE), map page 0
# (MMAP_PAGE_ZERO), fake an old kernel (UNAME26) or read-implies-exec. The query 0xffffffff is
# refused too: none of python, git, sh, coreutils or setarch makes it, and its users (sanitizers,
# gdb, valgrind) read -1 as "unknown" and go on. One rule, on all 64 bits of the argument:
# a value with high bits set is refused even though the kernel reads only the low 32.
PERSONALITY_ALLOWED = 0


def build(denied_errno: int = errno.EPERM) -> pyseccomp.SyscallFilter:
    """The filter. `denied_errno` is what the denied calls answer: EPERM, as in Docker; tests use
    an errno the kernel never gives to tell the filter's refusals from the kernel's own."""
    flt = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    deny = pyseccomp.ERRNO(denied_errno)
    for name in DENIED:
        if _known(name):
            flt.add_rule(deny, name)
    # One rule per flag: rules on the same call are OR-ed, the comparisons of one rule AND-ed.
    for flag in CLONE_NAMESPACE_FLAGS:
        flt.add_rule(deny, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    if _known("clone3"):
        flt.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    flt.add_rule(deny, "personality", pyseccomp.Arg(0, pyseccomp.NE, PERSONALITY_ALLOWED))
    # libseccomp takes one comparison per argument in a rule, so "not one of 1, 2, 10" is: above
    # 10 (which also catches a family with high bits set), or one of the gaps below.
    refuse_family = pyseccomp.ERRNO(SOCKET_FAMILY_ERRNO)
    top = max(SOCKET_FAMILIES)
    for call in ("socket", "socketpair"):
        flt.add_rule(refuse_family, call, pyseccomp.Arg(0, pyseccomp.GT, top))
        for family in range(top):
            if family not in SOCKET_FAMILIES:
                flt.add_rule(refuse_family, call, pyseccomp.Arg(0, pyseccomp.EQ, family))
    return flt


def _known(name: str) -> bool:
    return bool(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) >= 0)


@functools.cache
def bpf(denied_errno: int = errno.EPERM) -> bytes:
    """The compiled filter, built once per process (each run gets its own copy in a memfd)."""
    fd = os.memfd_create("agentos-seccomp")
    with os.fdopen(fd, "w+b") as file:
        build(denied_errno).export_bpf(file)
        file.seek(0)
        return file.read()
