"""The git repository of one memory scope: bare, written only by this module with git's plumbing.

No worktree exists: notes go in with `git fast-import` (one commit for a whole batch, the branch
moved at the end only if its tip is still the parent we read, so a commit cut short moves
nothing), and are read back with `ls-tree` and `cat-file --batch`. Paths and files are made by
`memory.notes` (no `.gitattributes`, hook or config can be written through it); git runs with no
system or user configuration.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

BRANCH = "refs/heads/main"
AUTHOR = "agentos memory <memory@agentos.invalid>"
TIMEOUT = 600.0
# A scope repository's whole configuration (a restore sets it too: `agentos.backups.restore`).
CONFIG = {"gc.auto": "0", "core.logAllRefUpdates": "false"}


class RepositoryError(RuntimeError):
    """git refused or failed on a memory repository."""


@dataclass(frozen=True)
class Change:
    path: str
    content: bytes | None  # None: the file is removed


def root() -> Path:
    return Path(settings.MEMORY_DIR)


def path_of(scope: str) -> Path:
    return root() / f"{scope}.git"


def blob_id(content: bytes) -> str:
    """The id git gives these bytes (so the index can name a note's version without asking)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def ensure(scope: str) -> Path:
    path = path_of(scope)
    if (path / "HEAD").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    building = path.with_name(path.name + ".new")
    _git(path.parent, "init", "--quiet", "--bare", "--initial-branch=main", str(building))
    for key, value in CONFIG.items():
        _git(building, "config", key, value)
    try:
        building.rename(path)
    except OSError:
        if not (path / "HEAD").is_file():  # not another writer's: ours failed
            raise
    return path


def head(scope: str, branch: str = BRANCH) -> str:
    """The branch's tip, or "" for a scope with no commit (or no repository) yet."""
    path = path_of(scope)
    if not (path / "HEAD").is_file():
        return ""
    done = _git(path, "rev-parse", "--verify", "--quiet", branch, check=False)
    return done.stdout.decode().strip()


def commit(
    scope: str, parent: str, changes: list[Change], message: str, *, branch: str = BRANCH
) -> str:
    """A commit of `changes` on top of `parent` ("" for the first) on `branch`; its id. Fails,
    changing nothing, if the branch is no longer at `parent` (or, new, does not start there)."""
    path = ensure(scope)
    stream = bytearray()
    stamp = f"{AUTHOR} {int(time.time())} +0000\n".encode()
    stream += f"commit {branch}\n".encode()
    stream += b"author " + stamp + b"committer " + stamp
    encoded = message.encode()
    stream += b"data %d\n" % len(encoded) + encoded + b"\n"
    if parent:
        stream += f"from {parent}\n".encode()
    for change in changes:
        if change.content is None:
            stream += f"D {change.path}\n".encode()
        else:
            stream += f"M 100644 inline {change.path}\n".encode()
            stream += b"data %d\n" % len(change.content) + change.content + b"\n"
    stream += b"done\n"
    done = _git(
        path,
        "fast-import",
        "--quiet",
        "--done",
        "--date-format=raw",
        input=bytes(stream),
        check=False,
    )
    if done.returncode != 0:
        raise RepositoryError(f"memory commit on {scope} failed: {done.stderr.decode().strip()}")
    return head(scope, branch)


def drop(scope: str, branch: str) -> None:
    """Delete a branch other than main (a proposal, once landed)."""
    if branch != BRANCH and head(scope, branch):
        _git(path_of(scope), "update-ref", "-d", branch)


def branches(scope: str, prefix: str) -> list[str]:
    # A scope's first proposal may come before any commit on main: look at the refs themselves.
    if not (path_of(scope) / "HEAD").is_file():
        return []
    listed = _git(path_of(scope), "for-each-ref", "--format=%(refname)", prefix).stdout
    return listed.decode().split()


def files(scope: str, commit_id: str, under: str = "") -> dict[str, str]:
    """Every file of the commit (those under the folder `under` only, when given): path -> blob
    id."""
    if not commit_id:
        return {}
    limit = ("--", under) if under else ()
    listed = _git(path_of(scope), "ls-tree", "-r", "-z", "--full-tree", commit_id, *limit).stdout
    found = {}
    for entry in listed.split(b"\0"):
        if entry:
            meta, _, name = entry.partition(b"\t")
            found[name.decode()] = meta.split()[2].decode()
    return found


def read(scope: str, blobs: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """(blob id, content) for each blob, through one `cat-file --batch`."""
    wanted = list(blobs)
    if not wanted:
        return
    done = _git(path_of(scope), "cat-file", "--batch", input="\n".join(wanted).encode() + b"\n")
    out = done.stdout
    position = 0
    for blob in wanted:
        end = out.index(b"\n", position)
        header = out[position:end].split()
        if len(header) != 3:
            raise RepositoryError(f"blob {blob} is missing from memory scope {scope}.")
        size = int(header[2])
        yield blob, out[end + 1 : end + 1 + size]
        position = end + 1 + size + 1


def describe(scope: str, ref: str) -> tuple[str, str, str]:
    """(commit id, ISO date, whole message) of the commit `ref` names in the scope."""
    shown = _git(path_of(scope), "log", "-n1", "--format=%H%x00%cI%x00%B", ref, "--").stdout
    commit_id, date, message = shown.decode().split("\0", 2)
    return commit_id, date, message


def log(scope: str, limit: int = 50) -> list[tuple[str, str, str]]:
    """(commit id, ISO date, subject) of the newest commits."""
    if not head(scope):
        return []
    listed = _git(
        path_of(scope), "log", f"-n{limit}", "--format=%H%x00%cI%x00%s", BRANCH
    ).stdout.decode()
    return [tuple(line.split("\0", 2)) for line in listed.splitlines() if line]  # type: ignore[misc]


def scopes() -> list[str]:
    """Every scope with a repository on disk."""
    base = root()
    if not base.is_dir():
        return []
    return sorted(
        str(found.relative_to(base))[: -len(".git")]
        for found in base.rglob("*.git")
        if (found / "HEAD").is_file()
    )


def _git(
    cwd: Path, *args: str, input: bytes | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root()),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(  # noqa: S603  # fixed program, an argv list
        ["git", "-c", "core.hooksPath=/dev/null", *args],  # noqa: S607  # PATH is set below
        cwd=cwd,
        env=env,
        input=input,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    if check and done.returncode != 0:
        raise RepositoryError(f"git {args[0]} failed: {done.stderr.decode().strip()}")
    return done
