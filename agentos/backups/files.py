"""Files into and out of an archive's entries: directory trees as tar streams, read without
interpreting anything in them, and our own git repositories as bundles.

A run's worktree is hostile (docs/design.md §13): it is copied as plain files — never a host git
on it, never a link followed, a file that shrinks or grows while it is read still takes exactly
the size it had — and extracted with tarfile's `tar` filter (nothing outside the destination, no
set-id bits), owners kept as numbers (the runs' sandbox uids). Staging and memory repositories
are ours: host git bundles them, with the hardened configuration of `tools.workspace`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from agentos.backups.sealed import CHUNK, EntryReader, EntryWriter
from tools import workspace

Skip = Callable[[str], bool]


class _Exact:
    """Exactly `size` bytes of an open file: cut where it grew, padded with zeros where it
    shrank since its size was read (the tar header already holds the size)."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._left = fd, size

    def read(self, size: int = -1) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        data = os.read(self._fd, want) if want else b""
        if len(data) < want:
            data += b"\0" * (want - len(data))
        self._left -= len(data)
        return data


def write_tree(out: EntryWriter, top: Path, *, skip: Skip | None = None) -> int:
    """A tar stream of everything under `top` (names relative to it); the number of files.
    `skip` gets each relative path and leaves out what it says (a whole folder for a folder)."""
    count = 0
    with tarfile.open(fileobj=cast(IO[bytes], out), mode="w|", format=tarfile.PAX_FORMAT) as tar:
        if not top.is_dir():
            return 0
        for folder, dirs, names in top.walk(follow_symlinks=False):
            relative_folder = folder.relative_to(top)
            kept = []
            for name in sorted(dirs):
                rel = str(relative_folder / name)
                if skip is not None and skip(rel):
                    continue
                count += _add(tar, folder / name, rel)
                if not (folder / name).is_symlink():  # a link to a folder is kept as a link
                    kept.append(name)
            dirs[:] = kept
            for name in sorted(names):
                rel = str(relative_folder / name)
                if skip is None or not skip(rel):
                    count += _add(tar, folder / name, rel)
    return count


def _add(tar: tarfile.TarFile, path: Path, name: str) -> int:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return 0  # removed while we walked
    member = tarfile.TarInfo(name)
    member.mode = stat.S_IMODE(info.st_mode)
    member.uid, member.gid = info.st_uid, info.st_gid
    member.mtime = int(info.st_mtime)
    if stat.S_ISDIR(info.st_mode):
        member.type = tarfile.DIRTYPE
        tar.addfile(member)
        return 0
    if stat.S_ISLNK(info.st_mode):
        member.type = tarfile.SYMTYPE
        member.linkname = str(path.readlink())  # kept as text, never followed
        tar.addfile(member)
        return 1
    if not stat.S_ISREG(info.st_mode):
        return 0  # sockets, pipes, devices: nothing to keep
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0  # replaced by something else, or removed, since lstat
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return 0
        member.size = opened.st_size
        tar.addfile(member, cast(IO[bytes], _Exact(fd, opened.st_size)))
    finally:
        os.close(fd)
    return 1


def extract_tree(source: EntryReader, top: Path) -> None:
    """The tar stream into `top` (created 0700 if missing), owners kept as numbers when we are
    root."""
    top.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tarfile.open(fileobj=cast(IO[bytes], source), mode="r|") as tar:
        tar.extractall(top, filter="tar", numeric_owner=True)


# --- Our git repositories as bundles ------------------------------------------------------------


def has_refs(repo: Path) -> bool:
    listed = workspace.host_git(repo, "for-each-ref", "--count=1", "--format=%(refname)")
    return bool(listed.stdout.strip())


def write_bundle(out: EntryWriter, repo: Path) -> None:
    """`git bundle create - --all` of a repository of ours, streamed into the entry."""
    process = subprocess.Popen(  # noqa: S603  # fixed program, an argv list
        ["git", *workspace.HARDENED, "bundle", "create", "--quiet", "-", "--all"],  # noqa: S607  # PATH is ours
        cwd=repo,
        env=workspace.git_environment(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pump(process.stdout, out)
    _, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"git bundle of {repo} failed: {err.decode(errors='replace').strip()}")


def read_bundle(source: EntryReader, into: Path, *, bare_config: dict[str, str]) -> None:
    """A bare repository at `into` holding every ref of the bundle (made beside it, renamed in
    place), with `bare_config` set."""
    building = into.with_name(into.name + ".restoring")
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    workspace.host_git(
        building.parent, "init", "--quiet", "--bare", "--initial-branch=main", str(building)
    )
    for key, value in bare_config.items():
        workspace.host_git(building, "config", key, value)
    with tempfile.NamedTemporaryFile(dir=building, prefix="restore-", suffix=".bundle") as file:
        pump(source, file)
        file.flush()
        workspace.host_git(building, "fetch", "--quiet", file.name, "+refs/*:refs/*")
    building.chmod(0o700)
    if into.exists():
        shutil.rmtree(into)
    building.rename(into)


def pump(source: Any, out: IO[bytes] | EntryWriter) -> int:
    total = 0
    while True:
        data = source.read(CHUNK)
        if not data:
            return total
        out.write(data)
        total += len(data)
