"""Who a sandbox runs as: a uid of its run's own when we are root, the named sandbox user for
commands that belong to no run, our own uid otherwise; and handing files over to that identity.

Each run has its own uid (`UID_BASE + run_id`, no passwd entry needed: the sandbox shows a
synthetic one), so no run can signal, trace or read another's processes or files, and per-uid
limits (RLIMIT_NPROC) are per run. As an ordinary user everything runs as our own uid: per-run
uids need root.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

DEFAULT_USER = "agentos-sandbox"
# Who builds the projects' environments (`cluster.environments`): no run's uid, and not the
# sandbox user either, so no command of a run or of the owner's ever shares its files.
BUILD_USER = "agentos-env"
# Per-run uids (and gids) start here: far above any uid a distribution or a directory service
# allocates (useradd stops at 60000, systemd's dynamic and container ranges end below 2**31).
UID_BASE = 2_000_000_000
# The highest uid used is 2**31 - 1: bubblewrap cannot map a uid of 2**31 or more into its user
# namespace ("setting up uid map: Invalid argument"), and (uid_t)-1 and -2 are special anyway.
MAX_RUN_ID = 2**31 - 1 - UID_BASE
NO_LOGIN = ("--shell", "/usr/sbin/nologin")
USERADD_LOCKED = 10  # useradd's exit status when /etc/passwd is locked by another writer
USER_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class SandboxUnavailable(RuntimeError):
    """This node cannot run the sandbox; the message says what is missing and how to fix it."""


_identities: dict[str, tuple[int, int]] = {}
_identity_lock = threading.Lock()


def sandbox_user() -> str:
    configured = getattr(settings, "AGENTOS_SANDBOX_USER", None) if settings.configured else None
    return str(configured or os.environ.get("AGENTOS_SANDBOX_USER") or DEFAULT_USER)


def identity(run_id: int | None = None) -> tuple[int, int]:
    """(uid, gid) that commands of `run_id` run as. When we are root: `UID_BASE + run_id` for a
    run, the named sandbox user (created if missing) without one. As an ordinary user: our own ids
    (bwrap as an ordinary user is already a sandbox, but runs are not apart from each other)."""
    if run_id is not None and not 0 <= run_id <= MAX_RUN_ID:
        raise ValueError(f"run id {run_id} is out of the sandbox uid range (0 to {MAX_RUN_ID})")
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    if run_id is not None:
        return _run_identity(run_id)
    name = sandbox_user()
    with _identity_lock:
        if name not in _identities:
            _identities[name] = _ensure_user(name)
        return _identities[name]


def builder() -> tuple[int, int]:
    """(uid, gid) that environments are built as: the named build user when we are root (created
    if missing), our own ids otherwise."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    with _identity_lock:
        if BUILD_USER not in _identities:
            _identities[BUILD_USER] = _ensure_user(BUILD_USER)
        return _identities[BUILD_USER]


def _run_identity(run_id: int) -> tuple[int, int]:
    uid = UID_BASE + run_id
    # A host account on our range would share its files and processes with the run.
    for kind, lookup in (("user", pwd.getpwuid), ("group", grp.getgrgid)):
        try:
            taken = lookup(uid)[0]
        except KeyError:
            continue
        raise SandboxUnavailable(
            f"the sandbox uid {uid} of run {run_id} belongs to the host {kind} {taken!r}: per-run"
            f" ids start at {UID_BASE}; move that account out of the range"
        )
    return uid, uid


def identity_name(run_id: int | None = None) -> str:
    """The user name the sandbox's synthetic passwd shows for `identity(run_id)`."""
    uid = identity(run_id)[0]
    if run_id is not None and uid == UID_BASE + run_id:
        return f"agentos-run-{run_id}"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return DEFAULT_USER


def _ensure_user(name: str) -> tuple[int, int]:
    entry = _lookup_user(name)
    if entry is not None:
        return entry
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    if not Path(useradd).exists():
        raise SandboxUnavailable(
            f"the sandbox user {name!r} does not exist and useradd is missing: create it"
            " (a system user with no home and no login shell) or apt-get install passwd"
        )
    # useradd checks that the name is free before it locks /etc/passwd, so two racing calls
    # both add it (two entries, two uids). Our own lock makes the check-then-add one step.
    with _user_lock():
        entry = _lookup_user(name)
        if entry is not None:
            return entry
        for attempt in range(5):
            done = subprocess.run(  # noqa: S603 (a fixed program and a name from our settings)
                [useradd, "--system", "--no-create-home", "--user-group", *NO_LOGIN, name],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != USERADD_LOCKED:
                break
            time.sleep(0.1 * (attempt + 1))  # someone else (not us) is editing /etc/passwd
        entry = _lookup_user(name)
    if entry is None:
        raise SandboxUnavailable(
            f"could not create the sandbox user {name!r}: useradd exited"
            f" {done.returncode}: {done.stderr.strip()}"
        )
    return entry


def _lookup_user(name: str) -> tuple[int, int] | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise SandboxUnavailable(
            f"the sandbox user {name!r} is root or in group root; set AGENTOS_SANDBOX_USER to a"
            " dedicated unprivileged user"
        )
    return entry.pw_uid, entry.pw_gid


@contextlib.contextmanager
def _user_lock() -> Iterator[None]:
    """An exclusive lock between our processes, in a directory only root can write."""
    directory = Path("/run") if Path("/run").is_dir() else Path("/var/lock")
    fd = os.open(directory / "agentos-sandbox-user.lock", USER_LOCK_FLAGS, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def give(path: Path, run_id: int | None = None, *, build: bool = False) -> None:
    """Make a directory tree the sandbox identity's own (`run_id`'s, or the builder's with
    `build`, when root; a no-op otherwise). Symlinks are changed themselves, never followed."""
    if os.geteuid() != 0:
        return
    uid, gid = builder() if build else identity(run_id)
    os.chown(path, uid, gid, follow_symlinks=False)
    if path.is_symlink() or not path.is_dir():
        return
    # fwalk works on directory fds: a directory swapped for a symlink mid-walk is not followed.
    for _dir, dirnames, filenames, dirfd in os.fwalk(path):
        for name in (*dirnames, *filenames):
            os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
