"""Git tools on the run's repository: status, diff, log, branch, commit, push.

Every git command on the worktree runs inside the run's sandbox, as the run's uid: whatever the
agent planted there (nested repositories, attributes, filters) can only act inside the sandbox.
The push is split: inside, git bundles the commit to push; on the host the bundle — data — is
imported into the project's staging repository, shown to the owner from there and pushed from
there with the project's credentials (`tools.remotes`), which the sandbox never sees.

`git_commit` marks its commit with the step's idempotency key (a trailer), so after a crash its
probe finds the commit instead of making a second one. `git_push` changes another machine: it
is external (an owner approval, bound to the arguments and to the exact commit and tree shown):
it pushes one commit made on the host from the worktree's HEAD (`tools.outgoing`), never the
run's own commits, and its probe asks the remote whether the branch already points at it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.sandbox import Limits, SandboxUnavailable, for_level
from kernel import artifacts, exposure
from kernel.models import Effect, Run
from tools import outgoing as pushed
from tools import remotes, workspace
from tools.base import Risk, Tool, ToolEnv, ToolError

if TYPE_CHECKING:
    from cluster.sandbox import Result

TRAILER = pushed.TRAILER
MAX_PREVIEW = 60_000  # characters of diff shown inline; the whole diff is an artifact
MAX_FILES_SHOWN = 500
BUNDLE = ".git/agentos-push.bundle"  # written by git in the sandbox; .git is read-only to the shell
SHA = re.compile(r"^[0-9a-f]{40}$")
# Inside the sandbox, on top of the sandbox's own git configuration: no optional lock, no
# submodule recursion, no helper programs the repository could name.
INSIDE = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "diff.external=",
    "-c",
    "submodule.recurse=false",
    "-c",
    "protocol.allow=never",
    "--no-optional-locks",
)


def _sandboxed(env: ToolEnv, argv: list[str], *, writable: bool, stdin: bytes = b"") -> Result:
    """Run `argv` in the run's sandbox on its worktree, with stderr apart; cancelled or timed
    out is a ToolError."""
    try:
        done = for_level(1).run(
            argv,
            workdir=env.need_workspace(),
            run_id=env.run_id,
            git_writable=writable,
            stderr_apart=True,
            stopping=env.call.stopping,
            stdin=stdin,
            limits=Limits(wall_seconds=workspace.GIT_TIMEOUT),
        )
    except SandboxUnavailable as error:
        raise ToolError(f"No sandbox on this node: {error}") from None
    if done.cancelled:
        raise ToolError("git: cancelled.")
    if done.timed_out:
        raise ToolError(f"git: took longer than {workspace.GIT_TIMEOUT} s; stopped.")
    return done


def sandbox_git(env: ToolEnv, *args: str, writable: bool = False) -> str:
    """Run git inside the run's sandbox on its worktree; its stdout, or `GitFailed`."""
    done = _sandboxed(env, ["git", *INSIDE, *args], writable=writable)
    if done.exit_code != 0:
        message = (done.errors or done.output).strip()
        raise GitFailed(f"git {args[0]} failed: {message}" if message else f"git {args[0]} failed.")
    return done.output


class GitFailed(ToolError):
    """git exited with an error (its message is the tool's answer)."""


def _status(env: ToolEnv, arguments: dict[str, Any]) -> str:
    return sandbox_git(env, "status", "--short", "--branch") or "(clean)"


def _diff(env: ToolEnv, arguments: dict[str, Any]) -> str:
    args = ["diff", "--no-ext-diff", "--no-textconv"]
    if arguments.get("staged"):
        args.append("--cached")
    if arguments.get("path"):
        args += ["--", workspace.relative(arguments["path"])]
    return sandbox_git(env, *args) or "(no changes)"


def _log(env: ToolEnv, arguments: dict[str, Any]) -> str:
    count = str(arguments.get("count", 10))
    return sandbox_git(env, "log", "--oneline", "--decorate", "-n", count)


def _branch(env: ToolEnv, arguments: dict[str, Any]) -> str:
    name = arguments.get("name")
    if not name:
        return sandbox_git(env, "branch", "--list", "--verbose")
    try:
        sandbox_git(env, "check-ref-format", "--branch", name)
    except GitFailed:
        raise ToolError(f"{name!r} is not a valid branch name.") from None
    head = _head(env)
    try:
        existing = sandbox_git(env, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}")
    except GitFailed:
        existing = ""
    if existing.strip():
        if existing.strip() == head:
            return f"Branch {name} already at {head[:12]}."
        raise ToolError(f"Branch {name} already exists at {existing.strip()[:12]}.")
    sandbox_git(env, "branch", name, head, writable=True)
    return f"Created branch {name} at {head[:12]}."


def _head(env: ToolEnv) -> str:
    head = sandbox_git(env, "rev-parse", "--verify", "HEAD^{commit}").strip()
    if not SHA.match(head):
        raise ToolError(f"The worktree's HEAD is not a commit ({head[:80]!r}).")
    return head


def _mark(env: ToolEnv) -> str:
    return f"{TRAILER}: {env.call.idempotency_key}"


# One sandbox start for the whole commit; the message comes on stdin (never a shell word).
COMMIT_SCRIPT = """\
git add --all || exit 2
git diff --cached --quiet && exit 3
exec git commit --quiet --no-verify --file=- --trailer "$1"
"""
NOTHING_TO_COMMIT = 3


def _commit(env: ToolEnv, arguments: dict[str, Any]) -> str:
    script = COMMIT_SCRIPT.replace("git ", "git " + " ".join(INSIDE) + " ")
    done = _sandboxed(
        env,
        ["/bin/sh", "-c", script, "sh", _mark(env)],
        writable=True,
        stdin=arguments["message"].encode(),
    )
    if done.exit_code == NOTHING_TO_COMMIT:
        raise ToolError("Nothing to commit: the worktree has no changes.")
    if done.exit_code != 0:
        raise ToolError(f"git commit failed: {(done.errors or done.output).strip()}")
    return _committed(env) or "Committed."


def _committed(env: ToolEnv) -> str | None:
    """The commit this very step made, if it exists (found by its trailer)."""
    found = sandbox_git(
        env, "log", "-n", "200", "--fixed-strings", f"--grep={_mark(env)}", "--format=%H %s"
    ).strip()
    if not found:
        return None
    sha, _, subject = found.splitlines()[0].partition(" ")
    return f"Committed {sha[:12]}: {subject}"


# --- Push -------------------------------------------------------------------------------------


def _staging(env: ToolEnv) -> Path:
    spec = Run.objects.filter(pk=env.run_id).values_list("input", flat=True).first() or {}
    repository = spec.get("repository") if isinstance(spec, dict) else None
    if not repository:
        raise ToolError("This run has no project repository to push from.")
    return workspace.staging(str(repository))


def _remote(stage: Path, arguments: dict[str, Any]) -> str:
    """A remote configured in the project's repository: never a path or URL chosen by the model."""
    remote = str(arguments.get("remote", "origin"))
    if remote not in workspace.remote_names(stage):
        raise ToolError(f"No remote named {remote!r} in this project's repository.")
    return remote


def _remote_sha(env: ToolEnv, stage: Path, arguments: dict[str, Any]) -> str:
    remote, branch = _remote(stage, arguments), arguments["branch"]
    with remotes.credentials(env.project_id, remote, workspace.remote_url(stage, remote)) as auth:
        listed = workspace.host_git(
            stage,
            "ls-remote",
            remote,
            f"refs/heads/{branch}",
            check=False,
            env=auth.env,
            stopping=env.call.stopping,
        )
    if listed.returncode != 0:
        raise ToolError(f"Cannot reach {remote}: {auth.scrub(listed.stderr.strip())}")
    return listed.stdout.split()[0] if listed.stdout.strip() else ""


def export_commit(env: ToolEnv) -> tuple[str, Path]:
    """Bundle the worktree's HEAD inside the sandbox and import it into the staging repository.
    The commit's hash and the staging repository holding it (under `refs/agentos/run-<id>/`)."""
    stage = _staging(env)
    head = _head(env)
    kept = f"refs/agentos/run-{env.run_id}/{head}"
    if workspace.host_git(stage, "rev-parse", "--verify", "--quiet", kept, check=False).stdout:
        return head, stage
    base = workspace.host_git(stage, "rev-parse", f"refs/agentos/run-{env.run_id}/base").stdout
    if head == base.strip():
        workspace.host_git(stage, "update-ref", kept, head)
        return head, stage
    # The run's base is in staging already: the bundle carries only what the run added.
    sandbox_git(
        env,
        "bundle",
        "create",
        "--quiet",
        BUNDLE,
        "HEAD",
        "--not",
        workspace.BASE_REF,
        writable=True,
    )
    with copied_bundle(env.need_workspace() / BUNDLE) as bundle:
        heads = workspace.host_git(stage, "bundle", "list-heads", str(bundle)).stdout.split()
        if heads[:1] != [head]:
            raise ToolError("The bundle made in the sandbox does not hold the worktree's HEAD.")
        workspace.host_git(stage, "fetch", "--quiet", "--no-tags", str(bundle), f"HEAD:{kept}")
    if workspace.host_git(stage, "rev-parse", kept).stdout.strip() != head:
        raise ToolError("The imported commit is not the worktree's HEAD.")
    return head, stage


@contextlib.contextmanager
def copied_bundle(source: Path) -> Iterator[Path]:
    """A host-owned copy of the bundle the sandbox wrote: opened without following links, only
    if it is a regular file of bounded size, so nothing can be swapped in while git reads it."""
    try:
        folder = os.open(source.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(source.name, flags, dir_fd=folder)
            os.unlink(source.name, dir_fd=folder)  # read once, never left lying around
        finally:
            os.close(folder)
    except OSError as error:
        raise ToolError(f"No bundle from the sandbox: {error.strerror}.") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > workspace.MAX_BUNDLE_BYTES:
            raise ToolError("The sandbox's bundle is not a regular file of a sane size.")
        out, name = tempfile.mkstemp(prefix="push-", suffix=".bundle", dir=workspace.root())
        copy = Path(name)
        try:
            with os.fdopen(out, "wb") as target:
                while chunk := handle.read(1 << 20):
                    target.write(chunk)
            yield copy
        finally:
            copy.unlink(missing_ok=True)


def _push_preview(env: ToolEnv, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the owner approves: the one commit that will be pushed (its hash, tree, parent and
    whole message, made from the worktree's HEAD), every changed path with its size and type,
    and the diff, bounded whatever the worktree holds (`tools.outgoing`)."""
    head, stage = export_commit(env)
    outgoing = pushed.make(stage, run_id=env.run_id, head=head)
    remote = _remote_sha(env, stage, arguments)
    if remote and not _has_commit(stage, remote):
        _fetch_remote_branch(env, stage, arguments)  # the remote moved on since: learn how
    known = bool(remote) and _has_commit(stage, remote)
    # A branch the remote does not have yet: what the run added to the commit it started from.
    since = remote if known else pushed.base_of(stage, env.run_id)
    changes = pushed.changed_files(stage, since, outgoing.commit)
    diff = pushed.diff(stage, since, outgoing.commit, changes)
    text = diff.out.decode(errors="replace")
    cut = "-cut" if diff.cut else ""
    full = artifacts.store(
        content=text.encode(),
        name=f"push-{outgoing.commit[:12]}{cut}.diff",
        media_type="text/x-diff",
        run=Run.objects.get(pk=env.run_id),
        preview_chars=0,
    )
    # Binary content shown as text, forced by --text: a NUL cannot go into the journal (jsonb),
    # so it is shown as the symbol for it.
    shown = text[:MAX_PREVIEW].replace("\x00", "\u2400")
    return {
        "commit": outgoing.commit,
        "tree": outgoing.tree,
        "parent": outgoing.parent,
        "message": outgoing.message,
        "author": outgoing.author,
        "head": outgoing.head,
        "remote_was": remote or None,
        # What the diff leaves out is listed first: it must not be cut from the list too.
        "files": [
            change.as_dict()
            for change in sorted(changes, key=lambda change: change.shown())[:MAX_FILES_SHOWN]
        ],
        "files_total": len(changes),
        "files_not_shown": sum(1 for change in changes if not change.shown()),
        "diff": shown,
        "diff_chars": len(text),
        "diff_truncated": len(shown) < len(text) or diff.cut,
        "full_diff": full.sha256,
        "full_diff_cut": diff.cut,
    }


def _has_commit(stage: Path, sha: str) -> bool:
    return (
        workspace.host_git(stage, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode
        == 0
    )


def _fetch_remote_branch(env: ToolEnv, stage: Path, arguments: dict[str, Any]) -> None:
    remote, branch = _remote(stage, arguments), arguments["branch"]
    with remotes.credentials(env.project_id, remote, workspace.remote_url(stage, remote)) as auth:
        workspace.host_git(
            stage,
            "fetch",
            "--quiet",
            "--no-tags",
            remote,
            f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}",
            check=False,
            env=auth.env,
            stopping=env.call.stopping,
        )


def _outgoing(env: ToolEnv) -> tuple[str, Path]:
    """The commit to push and the staging repository holding it: under an approval, exactly the
    one the owner was shown, made again from the same HEAD (same hash); under an owner's
    "always allow" rule (no approval), the one made from the worktree's HEAD now."""
    preview = (env.approval or {}).get("preview") or {}
    approved = preview.get("commit")
    head = _head(env)
    if approved and "head" not in preview:
        raise ToolError("This approval was given for an older kind of push preview; ask again.")
    if approved and head != preview["head"]:
        raise ToolError(
            f"HEAD moved to {head[:12]} since the owner approved pushing {approved[:12]};"
            " ask again."
        )
    exported, stage = export_commit(env)
    outgoing = pushed.make(stage, run_id=env.run_id, head=exported)
    if approved:
        kept = f"{pushed.ref(env.run_id, approved)}^{{tree}}"
        tree = workspace.host_git(stage, "rev-parse", "--verify", "--quiet", kept, check=False)
        if outgoing.commit != approved or tree.stdout.strip() != preview.get("tree"):
            raise ToolError("The commit to push is not the one the owner approved; ask again.")
    return outgoing.commit, stage


def _push(env: ToolEnv, arguments: dict[str, Any]) -> str:
    commit, stage = _outgoing(env)
    remote, branch = _remote(stage, arguments), arguments["branch"]
    with remotes.credentials(env.project_id, remote, workspace.remote_url(stage, remote)) as auth:
        # Exactly this commit to exactly this branch: an explicit refspec, no tag following
        # (whatever a configuration says), no hook.
        done = workspace.host_git(
            stage,
            "-c",
            "push.followTags=false",
            "push",
            "--porcelain",
            "--no-verify",
            "--no-follow-tags",
            remote,
            f"{commit}:refs/heads/{branch}",
            check=False,
            env=auth.env,
            stopping=env.call.stopping,
        )
    if done.returncode != 0:
        message = auth.scrub((done.stderr or done.stdout).strip())
        raise ToolError(f"Push refused by {remote}: {message}")
    return f"Pushed {commit[:12]} to {remote} {branch}."


def _push_probe(env: ToolEnv, arguments: dict[str, Any]) -> str | None:
    # The commit's hash is a function of the worktree's HEAD and the run's base: made again
    # after a crash, it is the one that was (or was not) pushed.
    preview = (env.approval or {}).get("preview") or {}
    expected = preview.get("commit")
    if not expected:
        head, stage = export_commit(env)
        expected = pushed.make(stage, run_id=env.run_id, head=head).commit
    if _remote_sha(env, _staging(env), arguments) == expected:
        remote = arguments.get("remote", "origin")
        return f"Pushed {expected[:12]} to {remote} {arguments['branch']}."
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
    min_sandbox_level=1,
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
    min_sandbox_level=1,
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
    min_sandbox_level=1,
    run=_log,
)
GIT_BRANCH = Tool(
    name="git_branch",
    description="List branches, or create one (name) at the current commit.",
    input_schema={"type": "object", "properties": {"name": REF}, "additionalProperties": False},
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    min_sandbox_level=1,
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
    min_sandbox_level=1,
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
    min_sandbox_level=1,
    run=_push,
    probe=_push_probe,
    preview=_push_preview,
    subject=lambda arguments: f"{arguments.get('remote', 'origin')} {arguments.get('branch', '')}",
    exposes=frozenset({exposure.OUTWARD}),  # changes another machine
)

GIT_TOOLS = [GIT_STATUS, GIT_DIFF, GIT_LOG, GIT_BRANCH, GIT_COMMIT, GIT_PUSH]
