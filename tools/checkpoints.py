"""Workspace checkpoints: the worktree's whole state as a git commit, taken inside the run's
sandbox before each step that writes it, so that a write applies once whatever it was.

A shell command is an idempotent write only if running it twice does what running it once did;
`echo x >> f` does not. So before each workspace-writing step the harness records a checkpoint (a
journaled step of its own); a replay of the write — its intent recorded, its result not, because
the worker died in between — first puts the worktree back to that checkpoint, then runs the write
again: it lands once.

A checkpoint is a commit whose tree is every file of the worktree, ignored ones included (a build
directory written twice is a write applied twice too), whose parent is the HEAD of the moment,
kept under `refs/agentos/checkpoints/<label>`. It uses an index of its own
(`.git/agentos-checkpoint.index`): the agent's staging area is never touched, and the stat cache
makes the next checkpoint cost only what changed. All of it runs in the sandbox, as the run's uid:
the host never reads the agent's tree with git.

Forks start from them too (`fork_worktree`): a fork from step N gets a repository of its own whose
files are the checkpoint taken after step N, and whose branch is at the commit of that moment.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from cluster.sandbox import Limits, SandboxUnavailable, for_level, give
from tools import workspace
from tools.base import ToolError
from tools.git import INSIDE

INDEX = ".git/agentos-checkpoint.index"
REF = "refs/agentos/checkpoints"
NAME = "workspace-checkpoint"  # the journaled step that takes one
GIT = "git " + " ".join(INSIDE)  # the git tools' own hardening

# Every path of the worktree but `.git` itself, ignored files included; prints commit tree head.
TAKE = f"""\
set -e
export GIT_INDEX_FILE={INDEX}
{GIT} add --all --force -- . ':(exclude).git'
tree=$({GIT} write-tree)
head=$({GIT} rev-parse --verify --quiet HEAD^{{commit}})
commit=$(echo "agentos checkpoint $1" | {GIT} commit-tree "$tree" -p "$head")
{GIT} update-ref "{REF}/$1" "$commit"
echo "$commit $tree $head"
"""
# The worktree back to a checkpoint's tree: what the checkpoint index knows now (after adding the
# current files) is replaced by the tree, files it lacks removed.
RESTORE = f"""\
set -e
export GIT_INDEX_FILE={INDEX}
{GIT} add --all --force -- . ':(exclude).git'
{GIT} read-tree -u --reset "$1"
"""
# A fork's repository, copied from its source: its own branch at the checkpoint's HEAD, the
# files of the checkpoint, the staging area equal to HEAD (what the agent had not committed stays
# uncommitted), no lock a torn copy may have carried.
SETTLE_FORK = f"""\
set -e
rm -f .git/index.lock .git/HEAD.lock
{GIT} update-ref "refs/heads/$1" "$2"
{GIT} symbolic-ref HEAD "refs/heads/$1"
export GIT_INDEX_FILE={INDEX}
{GIT} add --all --force -- . ':(exclude).git'
{GIT} read-tree -u --reset "$3"
unset GIT_INDEX_FILE
{GIT} read-tree "$2"
"""


def take(
    worktree: Path, *, run_id: int, label: str, stopping: threading.Event | None = None
) -> dict[str, str]:
    """Checkpoint the worktree now: `{"commit", "tree", "head"}`."""
    output = _sandboxed(worktree, run_id, TAKE, label, stopping=stopping)
    parts = output.split()
    if len(parts) != 3:
        raise ToolError(f"The workspace checkpoint said {output.strip()[:200]!r}.")
    commit, tree, head = parts
    return {"commit": commit, "tree": tree, "head": head}


def restore(
    worktree: Path, *, run_id: int, checkpoint: dict[str, Any], stopping: threading.Event | None
) -> None:
    """Put the worktree back to `checkpoint` (its files; HEAD and the staging area untouched)."""
    _sandboxed(worktree, run_id, RESTORE, str(checkpoint["tree"]), stopping=stopping)


def _sandboxed(
    worktree: Path, run_id: int, script: str, *args: str, stopping: threading.Event | None = None
) -> str:
    try:
        done = for_level(1).run(
            ["/bin/sh", "-c", script, "sh", *args],
            workdir=worktree,
            run_id=run_id,
            git_writable=True,
            stderr_apart=True,
            stopping=stopping,
            limits=Limits(wall_seconds=workspace.GIT_TIMEOUT),
        )
    except SandboxUnavailable as error:
        raise ToolError(f"No sandbox on this node: {error}") from None
    if done.exit_code != 0:
        raise ToolError(f"Workspace checkpoint failed: {(done.errors or done.summary()).strip()}")
    return done.output


# --- Forks ---------------------------------------------------------------------------------


def fork_worktree(
    run_id: int, *, source_run: int, source_worktree: Path, checkpoint: dict[str, Any]
) -> Path:
    """A repository of the fork's own, made once (a host-owned marker says it is complete): a
    copy of the source's repository, handed to the fork's uid, then set inside the fork's sandbox
    to `checkpoint` — its files, and its branch `agentos/run-<id>` at the checkpoint's HEAD.

    The copy is data only (`cp -a` recreates links and FIFOs without following or opening
    them); what the source may have written since the checkpoint is undone by the checkpoint.
    """
    path = workspace.root() / "worktrees" / f"run-{run_id}"
    marker = path.with_name(path.name + workspace.READY)
    identity = json.dumps({"fork_of": source_run, "checkpoint": checkpoint["commit"]})
    if path.is_dir() and workspace.read_marker(marker) == identity:
        return path
    marker.unlink(missing_ok=True)
    building = path.with_name(path.name + ".new")
    for leftover in (path, building):
        if leftover.exists() or leftover.is_symlink():
            workspace.remove(leftover)
    copied = subprocess.run(  # noqa: S603  # fixed program, paths of ours
        ["/bin/cp", "-a", "--no-target-directory", str(source_worktree), str(building)],
        capture_output=True,
        text=True,
        check=False,
        timeout=workspace.GIT_TIMEOUT * 5,
    )
    if copied.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise ToolError(f"Could not copy the source's workspace: {copied.stderr.strip()[:500]}")
    give(building, run_id)
    _sandboxed(
        building,
        run_id,
        SETTLE_FORK,
        f"agentos/run-{run_id}",
        str(checkpoint["head"]),
        str(checkpoint["tree"]),
    )
    building.rename(path)
    workspace.write_marker(marker, identity)
    return path
