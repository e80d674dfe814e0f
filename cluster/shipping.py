"""The control plane's side of worktrees on nodes that share no filesystem with it
(docs/cluster.md, "Worktrees on nodes"; the format and the node's side: `cluster.runner.treesync`).

Before a step runs on a remote node its worktree is described (a manifest: each path's type,
mode and content hash), the node is asked which contents it lacks, and only those are sent, in
bounded chunks over the runner's SSH channel. After the step, the contents it changed are
fetched the same way and applied to the worktree here, before the result goes to the journal:
the control plane stays the only writer of the run's history, and a node writes nothing but its
own copy. The tree is walked and written on directory descriptors without following links; no
process here interprets what the agent wrote (no git, no archive).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.runner import treesync
from cluster.runner.protocol import UNAVAILABLE, RpcError

Call = Callable[[str, dict[str, Any]], Any]
GIT = ".git"


@dataclass(frozen=True)
class Shipped:
    """A worktree as sent to a node for one step: the `tree` parameter of its `run`."""

    workdir: Path
    tree: dict[str, Any]
    owner: tuple[int, int]
    git_writable: bool
    sent_bytes: int
    total_bytes: int
    seconds: float


class Worktree:
    """A profile's worktree as placement weighs it and `ship` sends it: walked once, when first
    needed (a step placed on the local node never walks it)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._manifest: treesync.Manifest | None = None

    @classmethod
    def of(cls, profile: dict[str, Any]) -> Worktree | None:
        workdir = profile.get("workdir")
        return None if workdir is None else cls(Path(str(workdir)))

    def manifest(self) -> treesync.Manifest:
        if self._manifest is None:
            try:
                self._manifest = treesync.manifest(self.workdir)
            except (OSError, treesync.TreeError) as error:
                raise RpcError(
                    UNAVAILABLE, f"the worktree {self.workdir} cannot be read: {error}"
                ) from None
        return self._manifest

    def size(self) -> int:
        return treesync.size(self.manifest())


def weigh(worktree: Worktree | None, holders: set[str]) -> Callable[[Any], int]:
    """For placement: the worktree bytes a node lacks, none for the `holders` (the local node
    and those that answered a step of the run: they keep a copy), the whole tree for others."""

    def lacking(node: Any) -> int:
        if worktree is None or node.name in holders:
            return 0
        return worktree.size()

    return lacking


def tree_name(workdir: Path) -> str:
    """The node's name for a worktree: one copy per worktree path, whichever run step uses it."""
    return "w-" + hashlib.sha256(str(workdir).encode()).hexdigest()[:40]


def ship(call: Call, profile: dict[str, Any], worktree: Worktree | None = None) -> Shipped | None:
    """Send the profile's worktree to a node (what it lacks of it); None without a workdir."""
    worktree = worktree or Worktree.of(profile)
    if worktree is None:
        return None
    began = time.monotonic()
    workdir = worktree.workdir
    name = tree_name(workdir)
    want = worktree.manifest()
    where = {entry["s"]: rel for rel, entry in want.items() if entry["t"] == "f"}
    sizes = {entry["s"]: int(entry["n"]) for entry in want.values() if entry["t"] == "f"}
    lacking = call("tree_missing", {"tree": name, "shas": sorted(where)})
    sent = 0
    batch: dict[str, str] = {}
    held = 0
    for sha in lacking:
        try:
            if sizes[sha] > treesync.CHUNK_BYTES:
                sent += _send_parts(call, name, workdir, where[sha], sha, sizes[sha])
                continue
            data = treesync.read(workdir, where[sha], sha)
        except (OSError, KeyError, treesync.TreeError) as error:
            raise RpcError(UNAVAILABLE, f"the worktree changed while sent: {error}") from None
        batch[sha] = base64.b64encode(data).decode()
        held += len(data)
        if held >= treesync.CHUNK_BYTES:
            sent += call("tree_store", {"tree": name, "blobs": batch})
            batch, held = {}, 0
    if batch:
        sent += call("tree_store", {"tree": name, "blobs": batch})
    return Shipped(
        workdir=workdir,
        tree={"name": name, "manifest": want},
        owner=(int(profile["uid"]), int(profile["gid"])),
        git_writable=bool(profile.get("writable")),
        sent_bytes=sent,
        total_bytes=treesync.size(want),
        seconds=time.monotonic() - began,
    )


def bring_back(
    call: Call,
    key: str,
    result: dict[str, Any],
    *,
    workdir: Path,
    owner: tuple[int, int],
    git_writable: bool,
) -> dict[str, Any]:
    """Apply to `workdir` what the step changed in the node's copy (`result["tree"]`), fetching
    the changed contents from the node in bounded chunks; returns the bytes and seconds."""
    began = time.monotonic()
    tree = result.get("tree")
    if not isinstance(tree, dict):
        return {"back_bytes": 0, "back_seconds": 0.0}
    put = dict(tree.get("put") or {})
    remove = list(tree.get("remove") or [])
    if not git_writable:
        # The sandbox mounted .git read-only there as here: a change under it is not the step's.
        put = {rel: entry for rel, entry in put.items() if not _in_git(rel)}
        remove = [rel for rel in remove if not _in_git(rel)]
    contents: dict[str, bytes] = {}
    for sha in {str(e["s"]) for e in put.values() if e.get("t") == "f"}:
        if _size_of(put, sha) > treesync.CHUNK_BYTES:
            contents[sha] = _fetch_parts(call, key, sha)
    pending = sorted({str(e["s"]) for e in put.values() if e.get("t") == "f"} - set(contents))
    while pending:
        got = call("tree_fetch", {"key": key, "shas": pending})
        if not isinstance(got, dict) or not got:
            raise RpcError(UNAVAILABLE, "the node sent none of the step's changed files")
        for sha, encoded in got.items():
            data = base64.b64decode(str(encoded), validate=True)
            if sha not in pending or hashlib.sha256(data).hexdigest() != sha:
                raise RpcError(UNAVAILABLE, f"the node sent content that is not {sha[:64]!r}")
            contents[sha] = data
        pending = [sha for sha in pending if sha not in contents]
    try:
        treesync.apply(workdir, put, remove, contents.__getitem__, owner=owner)
    except (OSError, treesync.TreeError) as error:
        raise RpcError(UNAVAILABLE, f"the step's changes could not be applied: {error}") from None
    return {
        "back_bytes": sum(len(data) for data in contents.values()),
        "back_seconds": time.monotonic() - began,
    }


def _size_of(put: treesync.Manifest, sha: str) -> int:
    return max(int(e.get("n", 0)) for e in put.values() if e.get("s") == sha)


def _send_parts(call: Call, name: str, workdir: Path, rel: str, sha: str, size: int) -> int:
    """A content larger than a chunk, a chunk a call (the node checks the whole's hash)."""
    for offset in range(0, size, treesync.CHUNK_BYTES):
        data = treesync.read_part(workdir, rel, offset, treesync.CHUNK_BYTES)
        if not data:
            raise treesync.TreeError(f"{rel} shrank while it was being sent")
        part = {"sha": sha, "offset": offset, "size": size, "data": base64.b64encode(data).decode()}
        call("tree_store", {"tree": name, "part": part})
    return size


def _fetch_parts(call: Call, key: str, sha: str) -> bytes:
    """A changed content larger than a chunk, a chunk an answer, checked whole."""
    data = bytearray()
    while True:
        got = call("tree_fetch", {"key": key, "sha": sha, "offset": len(data)})
        chunk = base64.b64decode(str(got.get("data")), validate=True)
        data += chunk
        if not chunk or len(data) >= int(got.get("size", 0)):
            break
    if hashlib.sha256(data).hexdigest() != sha:
        raise RpcError(UNAVAILABLE, f"the node sent content that is not {sha[:64]!r}")
    return bytes(data)


def _in_git(rel: str) -> bool:
    return rel == GIT or rel.startswith(GIT + "/")
