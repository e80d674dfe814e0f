"""Protected paths around a shell command: recorded before it, put back after it.

The shell runs the agent's command with the worktree writable, so a command can create, change
or delete a protected path (`tools.permissions`: `.envrc`, `AGENTS.md`, `.githooks/`...). Before
the command, every protected entry of the worktree, at any depth, is recorded with all it holds
(type, mode, owner, content or link target); after it, the worktree is walked again and each
protected unit — a protected entry and everything under it — that differs is put back exactly:
created ones removed, deleted ones made again, changed ones restored, whether file, directory or
link. The top `.git` is left out: the sandbox mounts it read-only, and it is the git tools'.

Crash safety — the shell step is an idempotent write, replayed after a crash with the same
idempotency key, and a worker may be killed between any two lines:

1. The snapshot is persisted before the command runs, in a host-owned 0700 directory outside the
   worktree (`root()/snapshots/run-<id>-<key>`, which the sandbox never mounts), written under a
   temporary name, fsynced and renamed: it exists whole or not at all.
2. An attempt that finds it is a replay of an attempt that may have run its command: it restores
   the worktree from it first (and says so), then keeps it as its own snapshot.
3. After the command, the restore (idempotent: it compares, then fixes), then the snapshot is
   deleted. Killed before the delete, the replay goes through 2 and finds nothing left to undo;
   killed after it, the worktree is already restored and the replay starts afresh at 1.

Everything in the worktree is touched through directory descriptors without following links,
and without recursion (a command can nest directories deeper than Python's stack); files are
opened only once known to be regular, `O_NONBLOCK`: the command may have left links, FIFOs and
sockets anywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import permissions, safefs

MANIFEST = "manifest.json"
BLOBS = "blobs"
CHUNK = 1 << 20
MAX_NAMED = 20  # paths named in the note to the model; the rest are counted
MAX_SHOWN = 160  # characters of one path in the note; a longer one is cut in its middle
MAX_DEPTH = 200  # levels the walk enters (see `scan`)
DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
KEY = re.compile(r"^[0-9A-Za-z_-]{1,128}$")

# {"type": "file" | "dir" | "link" | "other" | "deep", "mode", "uid", "gid", "sha" | "target"}
Entry = dict[str, Any]


def snapshots_dir() -> Path:
    return safefs.host_dir("snapshots")


@dataclass
class Guard:
    """The protected paths of one shell step's worktree (see the module docstring)."""

    top: Path
    run_id: int
    key: str

    def __post_init__(self) -> None:
        if not KEY.match(self.key):
            raise ValueError(f"not an idempotency key: {self.key!r}")
        self.home = snapshots_dir() / f"run-{self.run_id}-{self.key}"

    def begin(self) -> list[str]:
        """Persist the snapshot (step 1), or restore from the one an interrupted attempt left
        (step 2); returns what that restore undid."""
        for leftover in self.home.parent.glob(f"{self.home.name}.tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True)  # an attempt killed while writing
        if (self.home / MANIFEST).is_file():
            return self.restore()
        # Renamed whole, a snapshot never lacks its manifest; whatever is there is not one.
        shutil.rmtree(self.home, ignore_errors=True)
        temp = self.home.with_name(f"{self.home.name}.tmp-{secrets.token_hex(4)}")
        temp.mkdir(mode=0o700)
        (temp / BLOBS).mkdir(mode=0o700)
        entries = scan(self.top, blobs=temp / BLOBS)
        _write_synced(temp / MANIFEST, json.dumps(entries, sort_keys=True).encode())
        _fsync_dir(temp / BLOBS)
        _fsync_dir(temp)
        temp.rename(self.home)
        _fsync_dir(self.home.parent)
        return []

    def end(self) -> list[str]:
        """Restore (step 3) and forget the snapshot; returns what was undone."""
        changes = self.restore()
        shutil.rmtree(self.home)
        _fsync_dir(self.home.parent)
        return changes

    def restore(self) -> list[str]:
        """Put every protected unit back as recorded; "<path> (created|deleted|modified)"."""
        before: dict[str, Entry] = json.loads((self.home / MANIFEST).read_bytes())
        after = scan(self.top)
        changes = []
        for root in sorted(_roots(before) | _roots(after)):
            was, now = _unit(before, root), _unit(after, root)
            if was == now or was.get(root, {}).get("type") == "deep":
                continue  # unchanged, or too deep to have been recorded: left as it is
            _put_back(self.top, root, was, self.home / BLOBS)
            what = "created" if not was else "deleted" if not now else "modified"
            changes.append(f"{root} ({what})")
        return changes


def note(changes: list[str], *, earlier: bool = False) -> str:
    """The line the model reads after the command's output."""
    shown = ", ".join(_short(change) for change in changes[:MAX_NAMED])
    if len(changes) > MAX_NAMED:
        shown += f" and {len(changes) - MAX_NAMED} more"
    when = " after an interrupted attempt of this command" if earlier else ""
    return f"[protected paths restored{when}: {shown}]"


def _short(change: str) -> str:
    if len(change) <= MAX_SHOWN:
        return change
    return f"{change[: MAX_SHOWN // 2]}...{change[-MAX_SHOWN // 2 :]}"


# --- Walking the worktree -------------------------------------------------------------------


def scan(top: Path, *, blobs: Path | None = None) -> dict[str, Entry]:
    """Every protected entry of the worktree (a protected name and all below it), keyed by
    relative path; file contents are hashed, and copied into `blobs` when given. One walk of the
    tree, on directory descriptors, depth first without recursion (descriptors held: one per
    level); only protected regular files are ever opened.

    A directory `MAX_DEPTH` levels down is not entered: it is a unit of its own (`deep`), so a
    tree made deeper than the walk goes is removed where it crossed that depth, whatever it held.
    """
    found: dict[str, Entry] = {}
    frames: list[tuple[int, str, list[tuple[str, bool]]]] = []
    fd = os.open(top, DIR_OPEN & ~os.O_NOFOLLOW)
    try:
        frames.append((fd, "", _scan_one(fd, "", False, found, blobs)))
        while frames:
            fd, prefix, subdirs = frames[-1]
            if not subdirs:
                os.close(frames.pop()[0])
                continue
            name, protected = subdirs.pop()
            try:
                sub = os.open(name, DIR_OPEN, dir_fd=fd)
            except OSError:
                continue  # swapped since the listing: the next scan sees what it became
            frames.append((sub, f"{prefix}{name}/", []))
            frames[-1][2].extend(_scan_one(sub, f"{prefix}{name}/", protected, found, blobs))
    finally:
        for fd, _, _ in frames:
            os.close(fd)
    return found


def _scan_one(
    fd: int, prefix: str, inside: bool, found: dict[str, Entry], blobs: Path | None
) -> list[tuple[str, bool]]:
    """Record one directory's protected entries; return its subdirectories to enter."""
    with os.scandir(fd) as listing:
        children = list(listing)
    depth = prefix.count("/") + 1  # of the children
    subdirs = []
    for child in children:
        name = child.name
        if not prefix and name == ".git":
            continue  # the top .git: read-only in the sandbox, and the git tools' business
        rel = f"{prefix}{name}"
        protected = inside or permissions.protected_name(name)
        if child.is_dir(follow_symlinks=False):
            if depth >= MAX_DEPTH:
                found[rel] = _entry(child.stat(follow_symlinks=False), "deep")
                continue
            if protected:
                found[rel] = _entry(child.stat(follow_symlinks=False), "dir")
            subdirs.append((name, protected))
        elif protected:
            found[rel] = _record(fd, child, blobs)
    return subdirs


def _entry(info: os.stat_result, kind: str) -> Entry:
    return {
        "type": kind,
        "mode": stat.S_IMODE(info.st_mode),
        "uid": info.st_uid,
        "gid": info.st_gid,
    }


def _record(fd: int, child: os.DirEntry[str], blobs: Path | None) -> Entry:
    info = child.stat(follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        return {**_entry(info, "link"), "target": os.readlink(child.name, dir_fd=fd)}
    if not stat.S_ISREG(info.st_mode):
        return _entry(info, "other")  # a FIFO, a socket: never opened
    try:
        source = os.open(child.name, safefs.READ_FLAGS, dir_fd=fd)
    except OSError:
        return _entry(info, "other")
    try:
        if not stat.S_ISREG(os.fstat(source).st_mode):
            return _entry(info, "other")
        return {**_entry(info, "file"), "sha": _copy(source, blobs)}
    finally:
        os.close(source)


def _copy(source: int, blobs: Path | None) -> str:
    """The sha256 of what `source` holds, copied to `blobs/<sha>` when `blobs` is given."""
    digest = hashlib.sha256()
    sink = None
    temp = (blobs or Path()) / f".in-{secrets.token_hex(6)}"
    if blobs is not None:
        sink = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        while chunk := os.read(source, CHUNK):
            digest.update(chunk)
            if sink is not None:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(sink, view) :]
        if sink is not None:
            os.fsync(sink)
    finally:
        if sink is not None:
            os.close(sink)
    sha = digest.hexdigest()
    if blobs is not None:
        temp.replace(blobs / sha)
    return sha


def _roots(entries: dict[str, Entry]) -> set[str]:
    """The protected units: entries none of whose parents is recorded."""
    return {path for path in entries if path.rpartition("/")[0] not in entries}


def _unit(entries: dict[str, Entry], root: str) -> dict[str, Entry]:
    below = f"{root}/"
    return {p: e for p, e in entries.items() if p == root or p.startswith(below)}


# --- Putting a unit back --------------------------------------------------------------------


def _put_back(top: Path, root: str, unit: dict[str, Entry], blobs: Path) -> None:
    """Remove whatever is at `root` now and make the recorded unit again (nothing when it did
    not exist). Directories on the way that are gone or no longer directories are made again."""
    *parents, name = root.split("/")
    with _parent(top, parents, make=bool(unit)) as parent:
        if parent is None:
            return  # its directory is gone and there is nothing to recreate in it
        _remove(parent, name)
        made: list[tuple[int, int]] = []  # (descriptor, mode) of directories: modes last
        try:
            for path in sorted(unit, key=lambda p: p.count("/")):
                inner = [] if path == root else [name, *path[len(root) + 1 :].split("/")[:-1]]
                with _descend(parent, inner) as holder:
                    made += _make(holder, path.rpartition("/")[2], unit[path], blobs)
            for fd, mode in reversed(made):
                os.fchmod(fd, mode)  # a read-only directory is closed only once it is full
        finally:
            for fd, _ in made:
                os.close(fd)


@contextlib.contextmanager
def _parent(top: Path, parents: list[str], *, make: bool) -> Iterator[int | None]:
    fds = [os.open(top, safefs.DIR_FLAGS & ~os.O_NOFOLLOW)]
    try:
        for part in parents:
            try:
                info = os.stat(part, dir_fd=fds[-1], follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is None or not stat.S_ISDIR(info.st_mode):
                if not make:
                    yield None
                    return
                if info is not None:
                    os.unlink(part, dir_fd=fds[-1])  # a link or a file where a directory was
                os.mkdir(part, 0o755, dir_fd=fds[-1])
                owner = os.fstat(fds[-1])
                made = os.open(part, DIR_OPEN, dir_fd=fds[-1])
                try:
                    _own(made, owner.st_uid, owner.st_gid)
                    os.fchmod(made, 0o755)
                finally:
                    os.close(made)
            fds.append(os.open(part, safefs.DIR_FLAGS, dir_fd=fds[-1]))
        yield fds[-1]
    finally:
        for fd in fds:
            os.close(fd)


@contextlib.contextmanager
def _descend(parent: int, inner: list[str]) -> Iterator[int]:
    fds: list[int] = []
    try:
        for part in inner:
            fds.append(os.open(part, safefs.DIR_FLAGS, dir_fd=fds[-1] if fds else parent))
        yield fds[-1] if fds else parent
    finally:
        for fd in fds:
            os.close(fd)


def _remove(parent: int, name: str) -> None:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        _remove_tree(parent, name)
    else:
        os.unlink(name, dir_fd=parent)


def _remove_tree(parent: int, name: str) -> None:
    """`rm -rf` on descriptors, never following a link, without recursion (a tree may be far
    deeper than Python's stack): one descriptor per level of the current branch."""
    frames = [(parent, name, os.open(name, DIR_OPEN, dir_fd=parent))]
    try:
        while frames:
            _, _, fd = frames[-1]
            deeper = None
            with os.scandir(fd) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        deeper = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if deeper is not None:
                frames.append((fd, deeper, os.open(deeper, DIR_OPEN, dir_fd=fd)))
                continue
            up, here, fd = frames.pop()
            os.close(fd)
            os.rmdir(here, dir_fd=up)
    finally:
        for _, _, fd in frames:
            os.close(fd)


def _make(parent: int, name: str, entry: Entry, blobs: Path) -> list[tuple[int, int]]:
    """Make one recorded entry; a directory's descriptor and mode are returned, to be set last."""
    kind = entry["type"]
    if kind in ("dir", "deep"):  # a deep one inside a protected unit: made again, empty
        os.mkdir(name, 0o700, dir_fd=parent)
        fd = os.open(name, DIR_OPEN, dir_fd=parent)
        _own(fd, entry["uid"], entry["gid"])
        return [(fd, entry["mode"])]
    if kind == "link":
        os.symlink(entry["target"], name, dir_fd=parent)
        if os.geteuid() == 0:
            os.chown(name, entry["uid"], entry["gid"], dir_fd=parent, follow_symlinks=False)
    elif kind == "file":
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        sink = os.open(name, flags, 0o600, dir_fd=parent)
        try:
            with (blobs / entry["sha"]).open("rb") as source:
                while chunk := source.read(CHUNK):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(sink, view) :]
            _own(sink, entry["uid"], entry["gid"])
            os.fchmod(sink, entry["mode"])
        finally:
            os.close(sink)
    # Anything else (a FIFO or a socket that was there before) is not made again.
    return []


def _own(fd: int, uid: int, gid: int) -> None:
    if os.geteuid() == 0:
        os.fchown(fd, uid, gid)


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
