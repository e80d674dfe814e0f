"""What a push sends, and the bounded view of it that the owner approves.

A push sends one commit, made here on the host in the staging repository: the tree of the run's
HEAD on the commit the run started from (its base), with HEAD's message. The run's own commits
(one that added a secret and the next that removed it, every message body) stay in staging and
are never reachable from what is pushed. The commit's hash depends only on that tree, that
parent, that message and HEAD's date (the identity is ours, fixed), so making it again after a
crash gives the same hash, which the push's probe finds on the remote.

The view costs the worker a bounded amount whatever the worktree holds: a file over
`MAX_FILE_BYTES` (before or after) is listed with its size and type but left out of the trees git
diffs, so git never even loads it; the diff is read from a pipe up to `FULL_DIFF_BYTES` and git is
stopped there; the listing of changed paths is bounded too.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import bounded_git, workspace
from tools.base import ToolError

IDENTITY = {
    "GIT_AUTHOR_NAME": "agentos",
    "GIT_AUTHOR_EMAIL": "agent@agentos.invalid",
    "GIT_COMMITTER_NAME": "agentos",
    "GIT_COMMITTER_EMAIL": "agent@agentos.invalid",
}
TRAILER = "Agentos-Step"  # git_commit's mark on its commits (tools.git)
MAX_COMMIT_BYTES = 1 << 20  # HEAD's commit object, headers and message
MAX_MESSAGE_BYTES = 64 << 10
MAX_FILE_BYTES = 1 << 20  # a larger file is listed, not diffed
FULL_DIFF_BYTES = 8 << 20  # the diff kept as an artifact; the rest is not read
MAX_LISTING_BYTES = 16 << 20  # `diff-tree -r -z` output, about 100,000 paths
MAX_SIZES_BYTES = 32 << 20  # `cat-file --batch-check` output for those paths
ZERO = "0" * 40
SHA = re.compile(r"^[0-9a-f]{40}$")
DATE = re.compile(rb" (\d{1,16}) ([+-]\d{4})$")
MODES = {"100755": "executable", "120000": "symlink", "160000": "submodule"}


@dataclass(frozen=True)
class Outgoing:
    """The one commit a push sends, and where it came from."""

    commit: str
    tree: str
    parent: str | None  # None: the run added nothing, its base itself is what is pushed
    message: str
    author: str
    head: str


def ref(run_id: int, commit: str) -> str:
    return f"refs/agentos/run-{run_id}/push-{commit}"


def base_of(stage: Path, run_id: int) -> str:
    return workspace.host_git(stage, "rev-parse", f"refs/agentos/run-{run_id}/base").stdout.strip()


def make(stage: Path, *, run_id: int, head: str) -> Outgoing:
    """The commit to push for the run's `head` (imported into `stage` already), made once and
    kept under `refs/agentos/run-<id>/push-<sha>`; the same commit whenever it is made again.

    1. HEAD's commit object is read (bounded): its tree, its committer date and its message.
    2. The message loses git_commit's own trailer (an internal step key: the worktree's probe
       needs it, the remote's readers do not, and the push's probe finds the commit by its
       hash) and becomes text: invalid UTF-8 replaced, NUL (which git refuses in a message)
       shown as ␀ — so the text the owner reads is the message, byte for byte.
    3. `git commit-tree <tree> -p <base>` with a fixed identity and HEAD's date.
    """
    base = base_of(stage, run_id)
    header, body = _read_commit(stage, head)
    if head == base:  # nothing added: the base itself (on the remote already, or a new branch)
        workspace.host_git(stage, "update-ref", ref(run_id, base), base)
        tree = _field(header, b"tree")
        return Outgoing(base, tree, None, _text(body), _author(header, b"author"), head)
    tree = _field(header, b"tree")
    message = _without_mark(_text(body))
    date = _date(header)
    made = bounded_git.run(
        stage,
        "commit-tree",
        tree,
        "-p",
        base,
        limit=4096,
        stdin=message.encode(),
        env={**IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
    )
    commit = made.out.decode(errors="replace").strip()
    if made.returncode != 0 or not SHA.match(commit):
        raise ToolError(f"Could not make the commit to push: {made.stderr.strip()}")
    workspace.host_git(stage, "update-ref", ref(run_id, commit), commit)
    author = f"{IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}> {date[1:]}"
    return Outgoing(commit, tree, base, message, author, head)


def _read_commit(stage: Path, sha: str) -> tuple[bytes, bytes]:
    read = bounded_git.run(stage, "cat-file", "commit", sha, limit=MAX_COMMIT_BYTES)
    if read.cut:
        raise ToolError(
            f"The commit to push is over {MAX_COMMIT_BYTES >> 20} MB (headers and message):"
            " too large to show; not pushed."
        )
    if read.returncode != 0:
        raise ToolError(f"Cannot read the commit to push: {read.stderr.strip()}")
    header, _, body = read.out.partition(b"\n\n")
    if len(body) > MAX_MESSAGE_BYTES:
        raise ToolError(
            f"The commit message is over {MAX_MESSAGE_BYTES >> 10} KB: too long to show the"
            " owner; shorten it (git_commit) before pushing."
        )
    return header, body


def _field(header: bytes, name: bytes) -> str:
    for line in header.split(b"\n"):
        if line.startswith(name + b" "):
            value = line[len(name) + 1 :].decode(errors="replace")
            if SHA.match(value):
                return value
    raise ToolError(f"The commit to push has no valid {name.decode()}.")


def _author(header: bytes, name: bytes) -> str:
    for line in header.split(b"\n"):
        if line.startswith(name + b" "):
            return line[len(name) + 1 :].decode(errors="replace")
    return ""


def _date(header: bytes) -> str:
    """HEAD's committer date as git reads it back ("@<seconds> <zone>"): the only part of the
    pushed commit's identity the run decides, and what makes the same HEAD give the same hash."""
    for line in header.split(b"\n"):
        if line.startswith(b"committer "):
            found = DATE.search(line)
            if found:
                return f"@{found.group(1).decode()} {found.group(2).decode()}"
    raise ToolError("The commit to push has no valid committer date.")


def _text(body: bytes) -> str:
    return body.decode("utf-8", errors="replace").replace("\x00", "\u2400")


def _without_mark(message: str) -> str:
    lines = message.split("\n")
    ended = lines[-1] == ""
    if ended:
        lines.pop()
    if not lines or not lines[-1].startswith(f"{TRAILER}: "):
        return message
    while lines and lines[-1].startswith(f"{TRAILER}: "):
        lines.pop()
    while lines and not lines[-1].strip():
        lines.pop()  # the blank line that opened the trailer block
    return "\n".join(lines) + "\n" if lines else ""


# --- The view --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    path: bytes
    status: str
    kind: str
    size: int | None  # the new size; None when deleted (or a submodule)
    largest: int | None  # the larger of the old and new sizes: what a diff would load

    def shown(self) -> bool:
        return self.kind == "submodule" or (
            self.largest is not None and self.largest <= MAX_FILE_BYTES
        )

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "path": self.path.decode(errors="replace"),
            "status": self.status,
            "size": self.size,
            "type": self.kind,
            "shown": self.shown(),
        }
        if not entry["shown"]:
            entry["reason"] = (
                f"over {MAX_FILE_BYTES >> 20} MB: not diffed"
                if self.largest is not None
                else "not in the repository"
            )
        return entry


def changed_files(stage: Path, since: str, commit: str) -> list[Change]:
    """Every path the push changes, with its status, type and sizes (read, not loaded)."""
    listed = bounded_git.run(
        stage,
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--no-commit-id",
        since,
        commit,
        limit=MAX_LISTING_BYTES,
    )
    if listed.cut:
        raise ToolError(
            "The push changes too many files to show the owner (their list alone is over"
            f" {MAX_LISTING_BYTES >> 20} MB); not pushed."
        )
    if listed.returncode != 0:
        raise ToolError(f"git diff-tree failed: {listed.stderr.strip()}")
    parts = listed.out.split(b"\0")
    raw: list[tuple[bytes, list[str]]] = []
    for meta, path in zip(parts[0::2], parts[1::2], strict=False):
        fields = meta.decode(errors="replace").lstrip(":").split()
        if len(fields) == 5:
            raw.append((path, fields))
    wanted = {
        sha
        for _, (old_mode, new_mode, old, new, _) in raw
        for mode, sha in ((old_mode, old), (new_mode, new))
        if sha != ZERO and mode != "160000"
    }
    sizes = _sizes(stage, wanted)
    changes = []
    for path, (old_mode, new_mode, old, new, status) in raw:
        mode = old_mode if status == "D" else new_mode
        kind = MODES.get(mode, "file")
        known = [sizes.get(sha) for sha in (old, new) if sha != ZERO]
        largest = None
        if kind != "submodule" and None not in known:
            largest = max((size for size in known if size is not None), default=0)
        size = None if status == "D" else sizes.get(new)
        changes.append(Change(path, status, kind, size, largest))
    return changes


def _sizes(stage: Path, shas: set[str]) -> dict[str, int]:
    if not shas:
        return {}
    checked = bounded_git.run(
        stage,
        "cat-file",
        "--batch-check=%(objectname) %(objectsize)",
        stdin="".join(f"{sha}\n" for sha in shas).encode(),
        limit=MAX_SIZES_BYTES,
    )
    if checked.cut or checked.returncode != 0:
        raise ToolError(f"Cannot read the sizes of the changed files: {checked.stderr.strip()}")
    sizes = {}
    for line in checked.out.decode(errors="replace").splitlines():
        sha, _, size = line.partition(" ")
        if size.isdigit():
            sizes[sha] = int(size)
    return sizes


def diff(stage: Path, since: str, commit: str, changes: list[Change]) -> bounded_git.Bounded:
    """The diff from `since` to `commit` as plain text whatever the commit's attributes say
    (`--text --no-textconv --no-ext-diff`, no attributes file), files not shown left out of
    both sides, read up to `FULL_DIFF_BYTES`."""
    hidden = [change.path for change in changes if not change.shown()]
    with tempfile.TemporaryDirectory(dir=workspace.root(), prefix="push-view-") as folder:
        left, right = since, commit
        if hidden:
            left = _tree_without(stage, since, hidden, Path(folder) / "left.index")
            right = _tree_without(stage, commit, hidden, Path(folder) / "right.index")
        done = bounded_git.run(
            stage,
            "diff",
            "--text",
            "--no-textconv",
            "--no-ext-diff",
            "--no-color",
            "--no-renames",
            left,
            right,
            limit=FULL_DIFF_BYTES,
        )
    if not done.cut and done.returncode != 0:
        raise ToolError(f"git diff failed: {done.stderr.strip()}")
    return done


def _tree_without(stage: Path, treeish: str, paths: list[bytes], index: Path) -> str:
    """`treeish`'s tree less `paths`, written through a throwaway index file (the staging
    repository's object store gains a tree; nothing else changes)."""
    env = {"GIT_INDEX_FILE": str(index)}
    workspace.host_git(stage, "read-tree", treeish, env=env)
    removal = b"".join(b"0 " + ZERO.encode() + b"\t" + path + b"\0" for path in paths)
    removed = bounded_git.run(
        stage, "update-index", "-z", "--index-info", stdin=removal, env=env, limit=1 << 16
    )
    if removed.returncode != 0:
        raise ToolError(f"git update-index failed: {removed.stderr.strip()}")
    return workspace.host_git(stage, "write-tree", env=env).stdout.strip()
