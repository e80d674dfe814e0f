"""The level-1 sandbox's seccomp filter: a BPF program that bubblewrap loads (`--seccomp FD`) just
before it runs the command.

An allow-list, as Docker's default profile is (moby `profiles/seccomp/default.json`, for a
container without added capabilities): a call not named here answers ENOSYS, what a kernel that
lacks the call answers, so programs fall back as they do on an older kernel (glibc does), and a call
added to the kernel after this list (`listmount`, `statmount`, `open_tree_attr`...) never reaches
it. From Docker's list we take away more than it does (tracing, io_uring, handles, NUMA, the
clock...), refused with EPERM as Docker refuses. Names the installed libseccomp does not know, or
that do not exist on this architecture, are skipped one by one: such a call answers ENOSYS.
Built with pyseccomp (ctypes over the system's libseccomp2).

The namespaces bubblewrap built stay the only ones: `unshare`/`setns` and `clone` with a namespace
flag fail, and `clone3` (whose flags sit in memory a filter cannot read) answers ENOSYS, which makes
glibc fall back to `clone`.
"""

from __future__ import annotations

import errno
import functools
import operator
import os

import pyseccomp

# Docker's default allow-list (its first, unconditional entry, and the per-architecture ones for
# x86_64 and arm64), in its order. Keep it in step with moby's profile when it changes; what we
# refuse of it is in DENIED_GROUPS, what we allow under conditions in CONDITIONAL.
_DOCKER_NAMES = """
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64
clock_nanosleep clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2
dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait
epoll_wait_old eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64
fadvise64_64 fallocate fanotify_mark fchdir fchmod fchmodat fchown fchown32 fchownat fcntl fcntl64
fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs
fstatfs64 fsync ftruncate ftruncate64 futex futex_time64 futex_waitv futimesat getcpu getcwd
getdents getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32
getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid getresgid32
getresuid getresuid32 getrlimit get_robust_list getrusage getsid getsockname getsockopt
get_thread_area gettid gettimeofday getuid getuid32 getxattr inotify_add_watch inotify_init
inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents io_pgetevents
io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit io_uring_enter io_uring_register
io_uring_setup ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown
lchown32 lgetxattr link linkat listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr
lstat lstat64 madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock
mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open mq_timedreceive
mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget msgrcv
msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat _newselect open
openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect
poll ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6
pselect6_time64 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom
recvmmsg recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat renameat2
restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn
rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity
sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler
sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam
sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop semtimedop_time64 send
sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32
setgroups setgroups32 setitimer setpgid setpriority setregid setregid32 setresgid setresgid32
setresuid setresuid32 setreuid setreuid32 setrlimit set_robust_list setsid setsockopt
set_thread_area set_tid_address setuid setuid32 setxattr shmat shmctl shmdt shmget shutdown
sigaltstack signalfd signalfd4 sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs
statfs64 statx symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create
timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64
timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill
truncate truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat utimensat_time64 utimes
vfork vmsplice wait4 waitid waitpid write writev
"""
DOCKER_ALLOWED: tuple[str, ...] = (
    *_DOCKER_NAMES.split(),
    "arch_prctl",  # x86_64
    # arm64
    "arm_fadvise64_64",
    "arm_sync_file_range",
    "sync_file_range2",
    "breakpoint",
    "cacheflush",
    "set_tls",
)

# Fail with EPERM (as in Docker), one group per reason. Names libseccomp does not know, or that do
# not exist on this architecture, are skipped (such a call answers ENOSYS, as any not allowed).
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


# Calls newer than that copy of Docker's list, each the newer form of a call it allows (fchmodat2 of
# fchmodat, the futex2 calls of futex, cachestat of mincore, map_shadow_stack of mmap, mseal of
# mprotect): glibc starts using them as kernels gain them. Not the mount-table readers
# (listmount, statmount) nor open_tree_attr, which belong with the mount calls refused below.
NEWER_ALLOWED = (
    "cachestat",
    "fchmodat2",
    "futex_requeue",
    "futex_wait",
    "futex_wake",
    "map_shadow_stack",
    "mseal",
)

# Allowed only under the argument rules of `build` (or, clone3, refused outright): never on the
# plain list, where an unconditional rule would make the argument rules moot.
CONDITIONAL = ("clone", "clone3", "personality", "socket", "socketpair")

ALLOWED = tuple(
    name
    for name in dict.fromkeys(DOCKER_ALLOWED + NEWER_ALLOWED)
    if name not in DENIED and name not in CONDITIONAL
)

# Anything not allowed or refused by name: what a kernel without the call answers.
UNKNOWN_ERRNO = errno.ENOSYS


def build(denied_errno: int = errno.EPERM) -> pyseccomp.SyscallFilter:
    """The filter. `denied_errno` is what the denied calls answer: EPERM, as in Docker; tests use
    an errno the kernel never gives to tell the filter's refusals from the kernel's own."""
    flt = pyseccomp.SyscallFilter(pyseccomp.ERRNO(UNKNOWN_ERRNO))
    allow = pyseccomp.ALLOW
    deny = pyseccomp.ERRNO(denied_errno)
    for name in ALLOWED:
        if _known(name):
            flt.add_rule(allow, name)
    for name in DENIED:
        if _known(name):
            flt.add_rule(deny, name)
    # The conditions of one call's rules never overlap, so no two actions compete. Rules on the
    # same call are OR-ed, the comparisons of one rule AND-ed. clone3 needs no rule: the default
    # answer is already its ENOSYS.
    namespaces = functools.reduce(operator.or_, CLONE_NAMESPACE_FLAGS)
    flt.add_rule(allow, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, namespaces, 0))
    for flag in CLONE_NAMESPACE_FLAGS:
        flt.add_rule(deny, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    flt.add_rule(allow, "personality", pyseccomp.Arg(0, pyseccomp.EQ, PERSONALITY_ALLOWED))
    flt.add_rule(deny, "personality", pyseccomp.Arg(0, pyseccomp.NE, PERSONALITY_ALLOWED))
    # libseccomp takes one comparison per argument in a rule, so "not one of 1, 2, 10" is: above
    # 10 (which also catches a family with high bits set), or one of the gaps below.
    refuse_family = pyseccomp.ERRNO(SOCKET_FAMILY_ERRNO)
    top = max(SOCKET_FAMILIES)
    for call in ("socket", "socketpair"):
        for family in SOCKET_FAMILIES:
            flt.add_rule(allow, call, pyseccomp.Arg(0, pyseccomp.EQ, family))
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
