"""Where agents work: one git worktree per writing run, and paths inside it.

Everything the agent wrote is untrusted here (DESIGN.md §7): paths are resolved without
following a symlink out of the worktree, and git runs with hooks, fsmonitor and the user's and
system's configuration off, so a file planted in the worktree cannot make the host run it.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import subprocess
from pathlib import Path

from django.conf import settings

from tools.base import ToolError

SANDBOX_MOUNT = "/workspace"  # where the sandbox sees the worktree
GIT_TIMEOUT = 120


def root() -> Path:
    """The directory holding worktrees and the demo repositories.

    The sandbox user must be able to reach it: as root, the data directory may sit under a
    private home (/root is 0700), so it lives under /var/lib/agentos instead, one directory per
    data directory; as an ordinary user, bwrap runs as that user and the data directory does.
    """
    configured = os.environ.get("AGENTOS_WORKSPACES_DIR")
    if configured:
        base = Path(configured)
    elif os.geteuid() == 0:
        key = hashlib.sha256(str(Path(settings.DATA_DIR).resolve()).encode()).hexdigest()[:12]
        base = Path("/var/lib/agentos") / key
    else:
        base = Path(settings.DATA_DIR) / "workspaces"
    if not base.is_dir():
        base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            for part in [base, *base.parents]:
                if part == Path("/var/lib") or part == Path("/"):
                    break
                part.chmod(0o711)  # searchable, not listable
    return base


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git on the host, hardened against what the agent may have planted in the worktree."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root()),  # no ~/.gitconfig of ours
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LANG": "C.UTF-8",
    }
    argv = [
        "git",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "safe.directory=*",  # worktrees belong to the sandbox user
        "-c",
        "user.name=agentos",
        "-c",
        "user.email=agent@agentos.invalid",
        "-c",
        "commit.gpgsign=false",
        *args,
    ]
    done = subprocess.run(  # noqa: S603  # an argv list, no shell
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT, check=False
    )
    if check and done.returncode != 0:
        raise ToolError(f"git {args[0]} failed: {(done.stderr or done.stdout).strip()}")
    return done


def ensure_worktree(run_id: int, repository: str, base: str = "HEAD") -> Path:
    """The run's worktree on branch `agentos/run-<id>`, created once (idempotent on replay)."""
    repo = Path(repository)
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        raise ToolError(f"{repository} is not a git repository.")
    from cluster.sandbox import give

    path = root() / "worktrees" / f"run-{run_id}"
    if _is_worktree_of(path, repo):
        give(path)  # a crash may have come between `worktree add` and handing it over
        return path
    if path.exists():  # a crash in the middle of `worktree add`, or a stale run's: start again
        shutil.rmtree(path)
    git(repo, "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "-B", f"agentos/run-{run_id}", str(path), base)
    give(path)
    return path


def _is_worktree_of(path: Path, repo: Path) -> bool:
    marker = path / ".git"
    if not marker.is_file() or marker.is_symlink():
        return False
    gitdir = marker.read_text(errors="replace").removeprefix("gitdir:").strip()
    if not Path(gitdir).is_dir():
        return False
    common = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()
    return Path(gitdir).resolve().parent.parent == Path(common).resolve()


def relative(path: str) -> str:
    """A workspace-relative, normalised path; the sandbox's /workspace/... is accepted too."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("A path is required.")
    if "\x00" in path:
        raise ToolError("A path cannot contain a NUL byte.")
    text = path.strip()
    if text == SANDBOX_MOUNT or text.startswith(SANDBOX_MOUNT + "/"):
        text = text[len(SANDBOX_MOUNT) :].lstrip("/") or "."
    if text.startswith("/") or text.startswith("~"):
        raise ToolError(f"{path}: absolute paths are refused; use a path inside the workspace.")
    normal = posixpath.normpath(text)
    if normal == ".." or normal.startswith("../"):
        raise ToolError(f"{path}: the path leaves the workspace.")
    return normal


def resolve(workspace: Path, path: str) -> Path:
    """The real path of `path` inside `workspace`, refusing any escape (`..`, absolute paths,
    symlinks pointing out). The file itself need not exist; its directory must resolve inside.
    """
    rel = relative(path)
    top = workspace.resolve()
    target = top / rel
    if target.is_symlink():
        real = target.resolve()
        if real != top and top not in real.parents:
            raise ToolError(f"{path}: a symbolic link out of the workspace; refused.")
        return real
    parent = target.parent.resolve()
    if parent != top and top not in parent.parents:
        raise ToolError(f"{path}: the path leaves the workspace through a symbolic link.")
    return parent / target.name if rel != "." else top
