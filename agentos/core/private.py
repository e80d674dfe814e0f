"""Files and directories only this process's user may read: secret key, vault keys, runtime dir.

Stdlib only (settings import it before Django is set up). A secret file is `0600` from the
moment it exists (never created wider and then chmod-ed), written whole (temp file, fsync,
link or rename), and refused when someone else could have read or planted it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_NEW_FILE = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unsafe(ImproperlyConfigured):
    """A secret file or private directory that another user could read, replace or own."""


def _write_temp(path: Path, text: str) -> Path:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, _NEW_FILE, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create(path: Path, text: str) -> bool:
    """Write `path` once, 0600 from creation; False (and nothing written) when it exists.

    Linked into place rather than renamed: two processes starting at once must not each write
    a different key, so the second one's link fails and it reads the first one's file.
    """
    if path.is_symlink() or path.exists():
        return False
    temp = _write_temp(path, text)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    except OSError:
        # A filesystem without hard links: create the file itself, still 0600 and exclusive
        # (a process starting at that very instant could read it before it is written).
        _write_exclusive(path, text)
    finally:
        temp.unlink(missing_ok=True)
    _sync_dir(path.parent)
    return True


def _write_exclusive(path: Path, text: str) -> None:
    try:
        fd = os.open(path, _NEW_FILE, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def replace(path: Path, text: str) -> None:
    """Replace `path`'s content whole: a reader sees the old file or the new one, never half."""
    temp = _write_temp(path, text)
    try:
        temp.replace(path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _sync_dir(path.parent)


def read(path: Path) -> str:
    """The content of a secret file, refused unless it is a regular file of ours, 0600 or less."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        if path.is_symlink():
            raise Unsafe(
                f"{path} is a symbolic link; a secret file must be a plain file."
            ) from None
        raise
    with os.fdopen(fd, encoding="utf-8") as handle:
        _check(path, os.fstat(handle.fileno()), kind="file")
        return handle.read()


def ensure_dir(path: Path) -> Path:
    """A directory only we can enter: created 0700, else refused unless it already is ours.

    Never chmod-ed when it existed before: it may not be ours to change (a shared /tmp, a home),
    and a directory somebody else prepared could hold their socket or symlinks.
    """
    created = False
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
        created = True
    info = os.lstat(path)
    if created and stat.S_IMODE(info.st_mode) != 0o700:
        # A restrictive umask took the owner's own bits; the directory is ours from its creation.
        path.chmod(0o700)
        info = os.lstat(path)
    _check(path, info, kind="directory")
    return path


def _check(path: Path, info: os.stat_result, *, kind: str) -> None:
    expected = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not expected(info.st_mode):
        raise Unsafe(f"{path} is not a {kind} (a symbolic link or something else); remove it.")
    uid = os.geteuid()
    if info.st_uid != uid:
        raise Unsafe(
            f"{path} belongs to uid {info.st_uid}, not to this process (uid {uid}): another "
            f"user may have prepared it. Remove it (or point agentos elsewhere) and start again."
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        fix = "chmod 700" if kind == "directory" else "chmod 600"
        raise Unsafe(
            f"{path} has mode {mode:04o}: other users can reach it. If nobody else could have "
            f"read it, `{fix} {path}`; otherwise remove it (a secret it held must be replaced)."
        )
