"""Git tools on the run's worktree: status, diff, log, branch, commit, push.

`git_commit` marks its commit with the step's idempotency key (a trailer), so after a crash its
probe finds the commit instead of making a second one. `git_push` changes another machine: it
is external (an owner approval, bound to the arguments and to the exact commit shown) and its
probe asks the remote whether the ref already points at that commit.
"""

from __future__ import annotations

from typing import Any

from kernel.models import Effect
from tools.base import Risk, Tool, ToolEnv, ToolError
from tools.workspace import git

TRAILER = "Agentos-Step"
MAX_PREVIEW = 60_000


def _status(env: ToolEnv, arguments: dict[str, Any]) -> str:
    return git(env.need_workspace(), "status", "--short", "--branch").stdout or "(clean)"


def _diff(env: ToolEnv, arguments: dict[str, Any]) -> str:
    args = ["diff", "--no-ext-diff", "--no-textconv"]
    if arguments.get("staged"):
        args.append("--cached")
    if arguments.get("path"):
        args += ["--", arguments["path"]]
    return git(env.need_workspace(), *args).stdout or "(no changes)"


def _log(env: ToolEnv, arguments: dict[str, Any]) -> str:
    count = str(arguments.get("count", 10))
    return git(env.need_workspace(), "log", "--oneline", "--decorate", "-n", count).stdout


def _branch(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    name = arguments.get("name")
    if not name:
        return git(top, "branch", "--list", "--verbose").stdout
    if git(top, "check-ref-format", "--branch", name, check=False).returncode != 0:
        raise ToolError(f"{name!r} is not a valid branch name.")
    head = git(top, "rev-parse", "HEAD").stdout.strip()
    existing = git(top, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}", check=False)
    if existing.returncode == 0:
        if existing.stdout.strip() == head:
            return f"Branch {name} already at {head[:12]}."
        raise ToolError(f"Branch {name} already exists at {existing.stdout.strip()[:12]}.")
    git(top, "branch", name, head)
    return f"Created branch {name} at {head[:12]}."


def _mark(env: ToolEnv) -> str:
    return f"{TRAILER}: {env.call.idempotency_key}"


def _commit(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    git(top, "add", "--all")
    if git(top, "diff", "--cached", "--quiet", check=False).returncode == 0:
        raise ToolError("Nothing to commit: the worktree has no changes.")
    git(
        top, "commit", "--quiet", "--no-verify", "-m", arguments["message"], "--trailer", _mark(env)
    )
    return _committed(env) or "Committed."


def _committed(env: ToolEnv) -> str | None:
    """The commit this very step made, if it exists (found by its trailer)."""
    found = git(
        env.need_workspace(),
        "log",
        "-n",
        "200",
        "--fixed-strings",
        f"--grep={_mark(env)}",
        "--format=%H %s",
        check=False,
    ).stdout.strip()
    if not found:
        return None
    sha, _, subject = found.splitlines()[0].partition(" ")
    return f"Committed {sha[:12]}: {subject}"


def _remote(env: ToolEnv, arguments: dict[str, Any]) -> str:
    """A remote configured in the repository: never a path or URL chosen by the model."""
    remote = arguments.get("remote", "origin")
    if remote not in git(env.need_workspace(), "remote").stdout.split():
        raise ToolError(f"No remote named {remote!r} in this repository.")
    return str(remote)


def _remote_sha(env: ToolEnv, arguments: dict[str, Any]) -> str:
    remote, branch = _remote(env, arguments), arguments["branch"]
    listed = git(env.need_workspace(), "ls-remote", remote, f"refs/heads/{branch}").stdout
    return listed.split()[0] if listed.strip() else ""


def _push_preview(env: ToolEnv, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the owner approves: the commit that will be pushed and the diff it brings."""
    top = env.need_workspace()
    head = git(top, "rev-parse", "HEAD").stdout.strip()
    remote = _remote_sha(env, arguments)
    known = (
        remote and git(top, "cat-file", "-e", f"{remote}^{{commit}}", check=False).returncode == 0
    )
    if known:
        log = git(top, "log", "--oneline", f"{remote}..{head}").stdout
        diff = git(top, "diff", "--no-ext-diff", "--no-textconv", remote, head).stdout
    else:
        log = git(top, "log", "--oneline", "-n", "10", head).stdout
        diff = git(top, "show", "--no-ext-diff", "--format=", head).stdout
    text = f"{log}\n{diff}"
    if len(text) > MAX_PREVIEW:
        text = text[:MAX_PREVIEW] + f"\n[... {len(text) - MAX_PREVIEW} more characters]"
    return {"commit": head, "remote_was": remote or None, "diff": text}


def _push(env: ToolEnv, arguments: dict[str, Any]) -> str:
    top = env.need_workspace()
    head = git(top, "rev-parse", "HEAD").stdout.strip()
    approved = (env.approval or {}).get("preview", {}).get("commit")
    if approved and approved != head:
        raise ToolError(
            f"HEAD moved to {head[:12]} since the owner approved pushing {approved[:12]};"
            " ask again."
        )
    remote, branch = _remote(env, arguments), arguments["branch"]
    pushed = git(top, "push", "--porcelain", remote, f"{head}:refs/heads/{branch}", check=False)
    if pushed.returncode != 0:
        raise ToolError(f"Push refused by {remote}: {(pushed.stderr or pushed.stdout).strip()}")
    return f"Pushed {head[:12]} to {remote} {branch}."


def _push_probe(env: ToolEnv, arguments: dict[str, Any]) -> str | None:
    head = git(env.need_workspace(), "rev-parse", "HEAD").stdout.strip()
    if _remote_sha(env, arguments) == head:
        return f"Pushed {head[:12]} to {arguments.get('remote', 'origin')} {arguments['branch']}."
    return None


NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
REF = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "pattern": "^[A-Za-z0-9_][A-Za-z0-9._/-]*$",
}
REMOTE = {
    "type": "string",
    "minLength": 1,
    "maxLength": 100,
    "pattern": "^[A-Za-z0-9_][A-Za-z0-9._-]*$",
}

GIT_STATUS = Tool(
    name="git_status",
    description="Show the worktree's branch and changed files.",
    input_schema=NO_ARGUMENTS,
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_status,
)
GIT_DIFF = Tool(
    name="git_diff",
    description="Show uncommitted changes (staged=true: the staged ones), optionally for one path.",
    input_schema={
        "type": "object",
        "properties": {
            "staged": {"type": "boolean"},
            "path": {"type": "string", "minLength": 1, "maxLength": 1000},
        },
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_diff,
)
GIT_LOG = Tool(
    name="git_log",
    description="Show the latest commits of the worktree's branch.",
    input_schema={
        "type": "object",
        "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 200}},
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_log,
)
GIT_BRANCH = Tool(
    name="git_branch",
    description="List branches, or create one (name) at the current commit.",
    input_schema={"type": "object", "properties": {"name": REF}, "additionalProperties": False},
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    run=_branch,
    subject=lambda arguments: str(arguments.get("name", "")),
)
GIT_COMMIT = Tool(
    name="git_commit",
    description="Stage every change of the worktree and commit it with the message.",
    input_schema={
        "type": "object",
        "properties": {"message": {"type": "string", "minLength": 1, "maxLength": 5000}},
        "required": ["message"],
        "additionalProperties": False,
    },
    effect=Effect.NON_IDEMPOTENT,
    risk=Risk.WORKSPACE_WRITE,
    run=_commit,
    probe=lambda env, arguments: _committed(env),
    subject=lambda arguments: str(arguments.get("message", "")),
)
GIT_PUSH = Tool(
    name="git_push",
    description=(
        "Push the worktree's current commit to a branch of a remote. Changes another machine:"
        " the owner is asked to approve the exact commit first."
    ),
    input_schema={
        "type": "object",
        "properties": {"remote": REMOTE, "branch": REF},
        "required": ["branch"],
        "additionalProperties": False,
    },
    effect=Effect.NON_IDEMPOTENT,
    risk=Risk.EXTERNAL,
    run=_push,
    probe=_push_probe,
    preview=_push_preview,
    subject=lambda arguments: f"{arguments.get('remote', 'origin')} {arguments.get('branch', '')}",
)

GIT_TOOLS = [GIT_STATUS, GIT_DIFF, GIT_LOG, GIT_BRANCH, GIT_COMMIT, GIT_PUSH]
