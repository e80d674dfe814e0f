"""Worktrees shipped between the control plane and a node that shares no filesystem with it.

Both ends walk a tree the agent wrote, so nothing here interprets it: no git, no archive
format, no link followed. A tree is described by its **manifest**, `{relative path: entry}`,
an entry being `{"t": "d", "m": mode}`, `{"t": "f", "m": mode, "s": sha256, "n": size}` or
`{"t": "l", "x": link text}`; FIFOs, sockets and devices are left out. Walks go through
directory descriptors without following links and without recursion, and a file is opened only
once known to be regular (`O_NOFOLLOW | O_NONBLOCK`, checked again on the descriptor).

The transfer is content-addressed, rsync-like at file granularity: a node keeps its copy of each
tree (`<state>/trees/<name>/copy`), is asked which contents it lacks (`missing`), is sent those
alone in bounded chunks (`store`), and then makes its copy equal to the manifest (`apply` with
what it holds). After the step it keeps the contents the command changed beside the step's
result (`keep`), which the control plane fetches in bounded chunks and applies to its worktree.
Applying is absolute (each path set to its entry, or removed), so applying twice is applying once.

Stdlib only: the runner imports it on the nodes, the control plane for its side.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cluster.runner.protocol import invalid

# Contents per `store` request and per `fetch` answer (base64 in a JSON line: a third more).
CHUNK_BYTES = 8 << 20
# A manifest of this many entries is about 30 MB of JSON: within a request line and an answer.
MAX_ENTRIES = 200_000
MAX_PATH = 4096
SHA = re.compile(r"^[0-9a-f]{64}$")
TREE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
# Content hashes of files seen unchanged since (device, inode, size, mtime, ctime): the ctime
# moves with every write and no process can set it, so a file rewritten keeps no stale hash.
_hashes: dict[tuple[int, int, int, int, int], str] = {}
_HASHES_KEPT = 200_000

Entry = dict[str, Any]
Manifest = dict[str, Entry]


class TreeError(Exception):
    """A tree could not be walked or applied (a path refused, a content missing or wrong)."""


# --- Walking -------------------------------------------------------------------------------


def manifest(top: Path) -> Manifest:
    """Every directory, regular file and link under `top`, depth first without recursion."""
    found: Manifest = {}
    frames: list[tuple[int, str, list[str]]] = []
    fd = os.open(top, DIR_OPEN & ~os.O_NOFOLLOW)
    try:
        frames.append((fd, "", _list(fd, "", found)))
        while frames:
            fd, prefix, subdirs = frames[-1]
            if not subdirs:
                os.close(frames.pop()[0])
                continue
            name = subdirs.pop()
            try:
                sub = os.open(name, DIR_OPEN, dir_fd=fd)
            except OSError:
                found.pop(f"{prefix}{name}", None)  # swapped since listed: seen as it is now
                continue
            frames.append((sub, f"{prefix}{name}/", []))
            frames[-1][2].extend(_list(sub, f"{prefix}{name}/", found))
            if len(found) > MAX_ENTRIES:
                raise TreeError(f"{top} holds more than {MAX_ENTRIES} entries")
    finally:
        for fd, _, _ in frames:
            os.close(fd)
    return found


def _list(fd: int, prefix: str, found: Manifest) -> list[str]:
    with os.scandir(fd) as listing:
        children = list(listing)
    subdirs = []
    for child in children:
        rel = f"{prefix}{child.name}"
        info = child.stat(follow_symlinks=False)
        mode = stat.S_IMODE(info.st_mode) & 0o777
        if stat.S_ISDIR(info.st_mode):
            found[rel] = {"t": "d", "m": mode}
            subdirs.append(child.name)
        elif stat.S_ISLNK(info.st_mode):
            found[rel] = {"t": "l", "x": os.readlink(child.name, dir_fd=fd)}
        elif stat.S_ISREG(info.st_mode):
            sha = _hash(fd, child.name, info)
            if sha is not None:
                found[rel] = {"t": "f", "m": mode, "s": sha, "n": info.st_size}
    return subdirs


def _hash(parent: int, name: str, info: os.stat_result) -> str | None:
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    known = _hashes.get(key)
    if known is not None:
        return known
    try:
        fd = os.open(name, READ, dir_fd=parent)
    except OSError:
        return None  # gone or swapped for a link since listed
    digest = hashlib.sha256()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    finally:
        os.close(fd)
    if len(_hashes) >= _HASHES_KEPT:
        _hashes.clear()
    _hashes[key] = digest.hexdigest()
    return _hashes[key]


def read(top: Path, rel: str, sha: str) -> bytes:
    """The content of regular file `rel` under `top`, which must hash to `sha`."""
    with _parent(top, rel) as (parent, name):
        if parent < 0:
            raise TreeError(f"{rel} is no longer there")
        fd = os.open(name, READ, dir_fd=parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TreeError(f"{rel} is no longer a regular file")
            data = b""
            with os.fdopen(os.dup(fd), "rb") as file:
                data = file.read()
        finally:
            os.close(fd)
    if hashlib.sha256(data).hexdigest() != sha:
        raise TreeError(f"{rel} changed while it was being sent")
    return data


def read_part(top: Path, rel: str, offset: int, length: int) -> bytes:
    """`length` bytes of regular file `rel` from `offset` (a file larger than a chunk is sent in
    parts; the receiver checks the whole against its hash)."""
    with _parent(top, rel) as (parent, name):
        if parent < 0:
            raise TreeError(f"{rel} is no longer there")
        fd = os.open(name, READ, dir_fd=parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TreeError(f"{rel} is no longer a regular file")
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)


def digest(tree: Manifest) -> str:
    return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()


def diff(old: Manifest, new: Manifest) -> tuple[Manifest, list[str]]:
    """What turns `old` into `new`: entries to set, paths to remove (deepest first)."""
    put = {rel: entry for rel, entry in new.items() if old.get(rel) != entry}
    remove = sorted((rel for rel in old if rel not in new), key=lambda rel: -rel.count("/"))
    return put, remove


def size(tree: Manifest) -> int:
    return sum(int(entry.get("n", 0)) for entry in tree.values() if entry["t"] == "f")


# --- Applying ------------------------------------------------------------------------------


def apply(
    top: Path,
    put: Manifest,
    remove: list[str],
    content: Callable[[str], bytes],
    *,
    owner: tuple[int, int] | None,
) -> None:
    """Make each path of `put` its entry (files from `content(sha)`) and remove `remove`,
    beneath `top` without following a link; whatever stands in an entry's way is removed."""
    for rel in [*remove, *put]:
        check_path(rel)
    for rel in remove:
        with _parent(top, rel) as (parent, name):
            if parent >= 0:
                _remove(parent, name)
    for rel in sorted(put, key=lambda rel: (rel.count("/"), rel)):
        entry = put[rel]
        with _parent(top, rel, create=True, owner=owner) as (parent, name):
            if entry["t"] == "d":
                _directory(parent, name, int(entry["m"]), owner)
            elif entry["t"] == "l":
                _remove(parent, name)
                os.symlink(str(entry["x"]), name, dir_fd=parent)
                if owner is not None:
                    os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)
            elif entry["t"] == "f":
                _file(parent, name, content(str(entry["s"])), int(entry["m"]), owner)
            else:
                raise TreeError(f"{rel}: unknown entry type {entry['t']!r}")


def check_path(rel: str) -> None:
    parts = rel.split("/")
    if (
        not rel
        or len(rel) > MAX_PATH
        or "\0" in rel
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise invalid(f"tree: {rel[:200]!r} is not a relative path inside the tree")


@contextlib.contextmanager
def _parent(
    top: Path, rel: str, *, create: bool = False, owner: tuple[int, int] | None = None
) -> Iterator[tuple[int, str]]:
    """The descriptor of `rel`'s directory and its last name. Missing or non-directory parents
    are made directories (given to `owner`) with `create`; without, a missing one yields -1."""
    *inner, name = rel.split("/")
    fds = [os.open(top, DIR_OPEN & ~os.O_NOFOLLOW)]
    try:
        for part in inner:
            try:
                fds.append(os.open(part, DIR_OPEN, dir_fd=fds[-1]))
            except OSError:
                if not create:
                    yield -1, name
                    return
                _directory(fds[-1], part, 0o755, owner)
                fds.append(os.open(part, DIR_OPEN, dir_fd=fds[-1]))
        yield fds[-1], name
    finally:
        for fd in fds:
            os.close(fd)


def _directory(parent: int, name: str, mode: int, owner: tuple[int, int] | None) -> None:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        _remove(parent, name)
        info = None
    if info is None:
        os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, DIR_OPEN, dir_fd=parent)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode & 0o777)
    finally:
        os.close(fd)


def _file(parent: int, name: str, data: bytes, mode: int, owner: tuple[int, int] | None) -> None:
    """Write `name` whole: an unnamed file (`O_TMPFILE`) written, then linked under a temporary
    name and renamed over the entry, so that a process killed meanwhile leaves no half file and,
    but for that instant between link and rename, no stray one in the tree."""
    temp = f".agentos-tree-{secrets.token_hex(6)}"
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=parent)
        named = False
    except OSError:  # a filesystem without O_TMPFILE: a named file from the start
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600, dir_fd=parent)
        named = True
    try:
        with os.fdopen(os.dup(fd), "wb") as file:
            file.write(data)
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode & 0o777)
        if not named:
            os.link(f"/proc/self/fd/{fd}", temp, dst_dir_fd=parent, follow_symlinks=True)
            named = True
    except BaseException:
        if named:
            os.unlink(temp, dir_fd=parent)
        raise
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            _remove(parent, name)
    os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)


def _remove(parent: int, name: str) -> None:
    """Remove `name` (a whole tree if a directory) without following a link."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, DIR_OPEN, dir_fd=parent)
    try:
        os.fchmod(fd, 0o700)  # a read-only directory the command left
        with os.scandir(fd) as listing:
            names = [child.name for child in listing]
        for child in names:
            _remove(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


# --- The node's side -----------------------------------------------------------------------


def tree_dir(state: Path, name: Any) -> Path:
    if not isinstance(name, str) or not TREE_NAME.match(name):
        raise invalid(f"tree.name must match {TREE_NAME.pattern}, not {name!r}")
    path = state / "trees" / name
    for directory, mode in ((state / "trees", 0o711), (path, 0o711), (path / "incoming", 0o700)):
        directory.mkdir(mode=mode, exist_ok=True)
    return path


def missing(state: Path, name: Any, shas: Any) -> list[str]:
    """The contents of `shas` the node's copy of tree `name` lacks (nor has received)."""
    if not isinstance(shas, list) or not all(isinstance(s, str) and SHA.match(s) for s in shas):
        raise invalid("shas must be a list of sha256 hex digests")
    home = tree_dir(state, name)
    have = {entry["s"] for entry in _copy_manifest(home).values() if entry["t"] == "f"}
    have |= {path.name for path in (home / "incoming").iterdir() if SHA.match(path.name)}
    return [sha for sha in dict.fromkeys(shas) if sha not in have]


def store(state: Path, name: Any, blobs: Any, part: Any = None) -> int:
    """Keep received contents (checked against their hashes) for the next `checkout`: whole
    (`blobs`), or one `part` of a content larger than a chunk."""
    if part is not None:
        return _store_part(tree_dir(state, name), part)
    if not isinstance(blobs, dict):
        raise invalid("blobs must be an object of sha256: base64 content")
    home = tree_dir(state, name)
    total = 0
    for sha, encoded in blobs.items():
        data = base64.b64decode(str(encoded), validate=True)
        if not SHA.match(sha) or hashlib.sha256(data).hexdigest() != sha:
            raise invalid(f"blob {sha[:70]!r} does not match its content's sha256")
        (home / "incoming" / sha).write_bytes(data)
        total += len(data)
    return total


def _store_part(home: Path, part: Any) -> int:
    """`{sha, offset, size, data}`: appended to `incoming/<sha>.part` in order; the last part
    checks the whole content against its hash and makes it a received content."""
    if not isinstance(part, dict) or not SHA.match(str(part.get("sha"))):
        raise invalid("part must be {sha, offset, size, data}")
    sha, offset, size = str(part["sha"]), part.get("offset"), part.get("size")
    if type(offset) is not int or type(size) is not int or not 0 <= offset < size:
        raise invalid("part.offset and part.size must be integers, 0 <= offset < size")
    data = base64.b64decode(str(part.get("data")), validate=True)
    pending = home / "incoming" / f"{sha}.part"
    held = pending.stat().st_size if offset and pending.exists() else 0
    if held != offset or offset + len(data) > size or not data:
        raise invalid(f"part of {sha} at {offset}: {held} bytes of it were received")
    with pending.open("ab" if offset else "wb") as file:
        file.write(data)
    if offset + len(data) == size:
        digest = hashlib.sha256()
        with pending.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != sha:
            pending.unlink()
            raise invalid(f"content {sha} does not match its sha256 once all its parts came")
        pending.rename(home / "incoming" / sha)
    return len(data)


def checkout(state: Path, name: Any, want: Any, owner: tuple[int, int]) -> tuple[Path, Manifest]:
    """Make the node's copy of tree `name` equal to manifest `want` (contents from the copy
    itself or received), owned by `owner`; returns its path and the manifest."""
    if not isinstance(want, dict) or not all(isinstance(e, dict) for e in want.values()):
        raise invalid("tree.manifest must be an object of entries")
    home = tree_dir(state, name)
    copy = home / "copy"
    copy.mkdir(mode=0o700, exist_ok=True)
    os.chown(copy, *owner)
    copy.chmod(0o755)
    have = _copy_manifest(home)
    put, remove = diff(have, want)
    incoming = home / "incoming"
    # Contents that move inside the copy are saved first: the path they are read from may be
    # overwritten before the path they go to is written.
    here = {entry["s"]: rel for rel, entry in have.items() if entry["t"] == "f"}
    for entry in put.values():
        sha = entry.get("s")
        if entry.get("t") == "f" and not (incoming / str(sha)).exists():
            if sha not in here:
                raise invalid(f"tree: content {sha} was neither sent nor on this node")
            (incoming / str(sha)).write_bytes(read(copy, here[sha], str(sha)))
    apply(copy, put, remove, lambda sha: (incoming / sha).read_bytes(), owner=owner)
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.mkdir(mode=0o700)
    return copy, want


def keep(copy: Path, before: Manifest, into: Path) -> dict[str, Any]:
    """After the step: what it changed in `copy`, each changed content saved in `into` (by
    hash, before the result file that names them is written)."""
    after = manifest(copy)
    put, remove = diff(before, after)
    into.mkdir(mode=0o700, exist_ok=True)
    total = 0
    for rel, entry in put.items():
        if entry["t"] == "f" and not (into / entry["s"]).exists():
            data = read(copy, rel, entry["s"])
            temp = into / f".{entry['s']}.tmp"
            with temp.open("wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            temp.replace(into / entry["s"])
            total += len(data)
    return {"put": put, "remove": remove, "bytes": total}


def fetch(into: Path, shas: Any) -> dict[str, str]:
    """Kept contents by hash, base64, at most `CHUNK_BYTES` of them (ask again for the rest)."""
    if not isinstance(shas, list) or not all(isinstance(s, str) and SHA.match(s) for s in shas):
        raise invalid("shas must be a list of sha256 hex digests")
    found: dict[str, str] = {}
    total = 0
    for sha in shas:
        try:
            if (into / sha).stat().st_size > CHUNK_BYTES:
                raise invalid(f"content {sha} is larger than a chunk: fetch it by parts")
            data = (into / sha).read_bytes()
        except FileNotFoundError:
            raise invalid(f"content {sha} is not kept with this result") from None
        if found and total + len(data) > CHUNK_BYTES:
            break
        found[sha] = base64.b64encode(data).decode()
        total += len(data)
    return found


def fetch_part(into: Path, sha: Any, offset: Any) -> dict[str, Any]:
    """`CHUNK_BYTES` of a kept content from `offset`, base64, and its size."""
    if not isinstance(sha, str) or not SHA.match(sha) or type(offset) is not int or offset < 0:
        raise invalid("sha must be a sha256 hex digest and offset a non-negative integer")
    try:
        with (into / sha).open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            file.seek(offset)
            data = file.read(CHUNK_BYTES)
    except FileNotFoundError:
        raise invalid(f"content {sha} is not kept with this result") from None
    return {"data": base64.b64encode(data).decode(), "size": size}


def _copy_manifest(home: Path) -> Manifest:
    copy = home / "copy"
    return manifest(copy) if copy.is_dir() else {}
