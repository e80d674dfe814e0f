"""`merge_work`: a parent run merges the committed work of a writer sub-agent into its own
worktree, inside its sandbox, as one merge commit.

A writer works in a repository of its own, made from the parent's checkpoint
(`missions.engine.harness.worksite`), on branch `agentos/run-<child id>`. Each run's tree is
owned by its own uid (0700): the parent's sandbox cannot even read the child's. So the work
travels as a bundle — data, as for a push: git bundles the child's new commits in the child's
sandbox, the host copies the file without following links, and git in the parent's sandbox
unbundles it (no transport: git inside has none) and merges with `--no-ff`. No host process ever
runs git on either tree.

On a conflict nothing changes: the merge is aborted in the sandbox and the model is told which
files conflict, and to delegate a resolver — a writer, whose worktree is a copy of the parent's,
that merges its conflicting sibling with this same tool: for a writer merging a sibling the
merge stops with the conflict markers in its tree, the resolver edits them and commits (git
records the merge), and the parent then merges the resolver, the sibling's work with it.

Durability: the tool is a workspace write (the harness checkpoints before it and puts the files
back on a replay), non-idempotent with a probe: the merge commit carries an `Agentos-Merge:
run-<id>` trailer, so after a kill between its effect and its result the probe finds it and
the merge is never made twice. A replay that finds a merge cut short first undoes it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cluster.sandbox import Limits, SandboxUnavailable, for_level
from kernel.models import Effect, Run
from tools.base import Risk, Tool, ToolEnv, ToolError
from tools.git import INSIDE, SHA, copied_bundle, sandbox_git
from tools.workspace import GIT_TIMEOUT

TRAILER = "Agentos-Merge"
CHILD_REF = "refs/agentos/children"  # in the parent's repository: each merged child's tip
BUNDLE = ".git/agentos-merge.bundle"  # written in the child's .git, then in the parent's
MAX_BUNDLE_BYTES = 512 << 20  # handed to the parent's sandbox on its stdin
MAX_LISTED = 50  # files named in an answer
GIT = "git " + " ".join(INSIDE)

# In the child's sandbox: its branch's tip, how many commits it added to the checkpoint it
# started from, what it changed without committing (paths that differ from both its HEAD and
# the checkpoint: the parent's own uncommitted changes, copied in, are not the child's), and the
# bundle of its new commits.
EXPORT = f"""\
set -e
rm -f {BUNDLE}
branch="refs/heads/agentos/run-$1"
tip=$({GIT} rev-parse --verify --quiet "$branch^{{commit}}") || exit 7
count=$({GIT} rev-list --count "$2..$tip")
echo "$tip $count"
export GIT_INDEX_FILE=.git/agentos-merge.index
{GIT} read-tree "$tip"
{GIT} add --all -- . ':(exclude).git'
now=$({GIT} write-tree)
rm -f "$GIT_INDEX_FILE"
unset GIT_INDEX_FILE
printf 'UNCOMMITTED\\0'
{GIT} diff-tree -r -z --name-only "$tip" "$now"
printf 'SINCE\\0'
{GIT} diff-tree -r -z --name-only "$3" "$now"
if [ "$count" -gt 0 ]; then
  {GIT} bundle create --quiet {BUNDLE} "$branch" --not "$2"
fi
"""
NO_BRANCH = 7

# In the parent's sandbox, the bundle on stdin. On a replay, first what a merge cut short may
# have left: locks of a killed git, its merge in progress (not another one, which a resolver
# may be resolving), or an index already holding the merge's result (the harness has put the
# files back to its checkpoint). A tree with uncommitted changes
# to tracked files is refused: the merge would mix them with the child's. A conflict is aborted
# (the tree as it was) and its files listed.
MERGE = f"""\
set -e
child=$1 tip=$2
ref="{CHILD_REF}/run-$child"
if [ "$3" = 1 ]; then
  rm -f .git/index.lock .git/HEAD.lock .git/ORIG_HEAD.lock .git/MERGE_HEAD.lock
  if [ ! -f .git/MERGE_HEAD ]; then {GIT} reset --quiet
  elif [ "$(cat .git/MERGE_HEAD)" = "$tip" ]; then {GIT} merge --abort
  fi
fi
if [ -f .git/MERGE_HEAD ]; then exit 8; fi
dirty=$({GIT} status --porcelain --untracked-files=no)
if [ -n "$dirty" ]; then printf '%s\\n' "$dirty" | head -n {MAX_LISTED}; exit 4; fi
cat > {BUNDLE}
{GIT} bundle unbundle {BUNDLE} > /dev/null
rm -f {BUNDLE}
{GIT} update-ref "$ref" "$tip"
if {GIT} merge-base --is-ancestor "$tip" HEAD; then
  echo "present $({GIT} rev-parse HEAD)"
  exit 0
fi
if {GIT} merge --no-ff --no-edit --no-verify -m "$4" -m "{TRAILER}: run-$child" "$ref" >&2; then
  echo "merged $({GIT} rev-parse HEAD)"
  exit 0
fi
if [ -f .git/MERGE_HEAD ]; then
  printf 'CONFLICT\\0'
  {GIT} diff --name-only -z --diff-filter=U
  if [ "$5" = 1 ]; then exit 9; fi
  {GIT} merge --abort
  exit 5
fi
exit 6
"""
DIRTY, CONFLICT, IN_PROGRESS, KEPT = 4, 5, 8, 9


def _merge(env: ToolEnv, arguments: dict[str, Any]) -> str:
    child = _child(env, _named(env, arguments))
    top = env.need_workspace()
    tip, added, uncommitted, bundle = _export(env, child)
    note = _left_out(child["id"], uncommitted)
    if added == 0:
        return f"Run {child['id']} committed nothing: nothing to merge.{note}"
    message = f"Merge the work of run {child['id']}" + (
        f" ({child['name']})" if child["name"] else ""
    )
    replay = "1" if env.call.replay else "0"
    keep = "1" if child["sibling"] else "0"
    argv = ["/bin/sh", "-c", MERGE, "sh", str(child["id"]), tip, replay, message, keep]
    done = _in_sandbox(top, env, argv, stdin=bundle)
    if done.exit_code == IN_PROGRESS:
        raise ToolError(
            "Refused: a merge is in progress in this workspace; resolve its conflicts and"
            " commit it (git_commit) first."
        )
    if done.exit_code == DIRTY:
        raise ToolError(
            "Refused: this workspace has uncommitted changes to tracked files; commit them"
            f" (git_commit) first, then merge run {child['id']}:\n{done.output.strip()}"
        )
    files = [name for name in done.output.partition("CONFLICT\0")[2].split("\0") if name]
    if done.exit_code == CONFLICT:
        raise ToolError(_conflict(child["id"], files))
    if done.exit_code == KEPT:
        return _to_resolve(child["id"], files) + note
    if done.exit_code != 0:
        said = (done.errors or done.output).strip()[-2000:]
        raise ToolError(f"Could not merge run {child['id']}: {said}")
    word, _, head = done.output.strip().splitlines()[-1].partition(" ")
    if word == "present":
        return f"Run {child['id']}'s work is already in this workspace (HEAD {head[:12]}).{note}"
    return (
        f"Merged run {child['id']} into this workspace: {head[:12]}"
        f" ({added} commit{'s' if added != 1 else ''}).{note}"
    )


def _merged(env: ToolEnv, arguments: dict[str, Any]) -> str | None:
    """The merge commit of this child in the parent's history, if it exists (after a crash)."""
    try:
        child = _named(env, arguments)
    except ToolError:
        return None
    found = sandbox_git(
        env,
        "log",
        "--merges",
        "-n",
        "1",
        "--format=%H",
        "--fixed-strings",
        f"--grep={TRAILER}: run-{child}",
        "HEAD",
    ).strip()
    if not SHA.match(found):
        return None
    return f"Merged run {child} into this workspace: {found[:12]}."


def _named(env: ToolEnv, arguments: dict[str, Any]) -> int:
    """The run a call names: by its id, or by the name its task had in the `delegate` call —
    the latest sub-agent of this run (or, for a writer, sibling) given that task."""
    # One or the other, checked here: providers refuse a schema with a top-level `oneOf`.
    if "run" in arguments and "task" in arguments:
        raise ToolError("Refused: name the sub-agent's work by its task or by its run, not both.")
    if "run" not in arguments and "task" not in arguments:
        raise ToolError("Say whose work to merge: its task's name (task) or its run id (run).")
    if "run" in arguments:
        return int(arguments["run"])
    task = str(arguments["task"])
    parent = Run.objects.filter(pk=env.run_id).values_list("parent_id", flat=True).first()
    for owner in (env.run_id, parent):
        found = (
            Run.objects.filter(parent_id=owner, input__contract__name=task)
            .exclude(pk=env.run_id)
            .order_by("-pk")
            .values_list("pk", flat=True)
            .first()
        )
        if found is not None:
            return int(found)
    raise ToolError(f"Refused: no sub-agent of this run was given a task named {task!r}.")


def _child(env: ToolEnv, child_id: int) -> dict[str, Any]:
    """The run to merge: a writer sub-agent of this run that has ended — or, when this run is a
    writer itself (a resolver), a writer sibling that has ended."""
    me = Run.objects.filter(pk=env.run_id).values_list("parent_id", "input").first()
    run = Run.objects.filter(pk=child_id).exclude(pk=env.run_id).first()
    sibling = (
        run is not None
        and me is not None
        and run.parent_id is not None
        and run.parent_id == me[0]
        and _base_of(me[1]) is not None
    )
    if run is None or (run.parent_id != env.run_id and not sibling):
        raise ToolError(
            f"Refused: run {child_id} is not a sub-agent of this run; only the work of this run's"
            " own sub-agents can be merged (and, by a writer, its sibling writers')."
        )
    if not run.is_terminal:
        raise ToolError(f"Run {child_id} has not ended yet ({run.status}): merge it once it ends.")
    contract = (run.input or {}).get("contract") if isinstance(run.input, dict) else None
    checkpoint = _base_of(run.input)
    if checkpoint is None or not run.workspace:
        raise ToolError(
            f"Run {child_id} was not a writer (no worktree of its own): it has nothing to merge."
        )
    head, tree = str(checkpoint.get("head", "")), str(checkpoint.get("tree", ""))
    if not SHA.match(head) or not SHA.match(tree):
        raise ToolError(f"Run {child_id} has no valid starting checkpoint.")
    path = Path(run.workspace)
    if not path.is_dir():
        raise ToolError(f"Run {child_id}'s workspace was removed: its work cannot be merged.")
    name = str(contract.get("name", "")) if isinstance(contract, dict) else ""
    return {
        "id": run.pk,
        "path": path,
        "head": head,
        "tree": tree,
        "name": re.sub(r"\s+", " ", name).strip()[:100],
        "sibling": sibling,
    }


def _base_of(spec: Any) -> dict[str, Any] | None:
    """The parent's checkpoint a writer's input says it started from (None: not a writer)."""
    contract = spec.get("contract") if isinstance(spec, dict) else None
    found = contract.get("base_checkpoint") if isinstance(contract, dict) else None
    return found if isinstance(found, dict) else None


def _export(env: ToolEnv, child: dict[str, Any]) -> tuple[str, int, list[str], bytes]:
    """In the child's sandbox: its tip, commits added, uncommitted paths, and the bundle."""
    done = _in_sandbox(
        child["path"],
        env,
        ["/bin/sh", "-c", EXPORT, "sh", str(child["id"]), child["head"], child["tree"]],
        run_id=child["id"],
    )
    if done.exit_code == NO_BRANCH:
        raise ToolError(f"Run {child['id']}'s workspace has no branch agentos/run-{child['id']}.")
    if done.exit_code != 0:
        said = (done.errors or done.output).strip()[-2000:]
        raise ToolError(f"Could not read run {child['id']}'s work: {said}")
    first, _, rest = done.output.partition("\n")
    tip, _, count = first.partition(" ")
    if not SHA.match(tip) or not count.strip().isdigit():
        raise ToolError(f"Could not read run {child['id']}'s work: {first[:200]!r}.")
    changed, _, since = rest.partition("SINCE\0")
    changed = changed.partition("UNCOMMITTED\0")[2]
    started = set(since.split("\0"))
    uncommitted = [name for name in changed.split("\0") if name and name in started]
    added = int(count)
    if added == 0:
        return tip, 0, uncommitted, b""
    with copied_bundle(child["path"] / BUNDLE) as copy:
        if copy.stat().st_size > MAX_BUNDLE_BYTES:
            raise ToolError(
                f"Run {child['id']}'s work is over {MAX_BUNDLE_BYTES >> 20} MiB: too big to merge."
            )
        bundle = copy.read_bytes()
    return tip, added, uncommitted, bundle


def _in_sandbox(
    top: Path, env: ToolEnv, argv: list[str], *, run_id: int | None = None, stdin: bytes = b""
) -> Any:
    try:
        done = for_level(1).run(
            argv,
            workdir=top,
            run_id=env.run_id if run_id is None else run_id,
            git_writable=True,
            stderr_apart=True,
            stopping=env.call.stopping,
            stdin=stdin,
            limits=Limits(wall_seconds=GIT_TIMEOUT),
        )
    except SandboxUnavailable as error:
        raise ToolError(f"No sandbox on this node: {error}") from None
    if done.cancelled:
        raise ToolError("merge_work: cancelled.")
    if done.timed_out:
        raise ToolError(f"merge_work: took longer than {GIT_TIMEOUT} s; stopped.")
    return done


def _left_out(child_id: int, uncommitted: list[str]) -> str:
    if not uncommitted:
        return ""
    shown = ", ".join(uncommitted[:MAX_LISTED])
    more = f" and {len(uncommitted) - MAX_LISTED} more" if len(uncommitted) > MAX_LISTED else ""
    return f"\nRun {child_id} left changes it did not commit, which are not merged: {shown}{more}."


def _conflict(child_id: int, files: list[str]) -> str:
    shown = "\n".join(f"- {name}" for name in files[:MAX_LISTED])
    if len(files) > MAX_LISTED:
        shown += f"\n- and {len(files) - MAX_LISTED} more"
    return (
        f"Merge conflict: run {child_id}'s work and this workspace both changed these files, and"
        f" nothing was merged (this workspace is as it was):\n{shown}\n"
        "Hand the conflict to a resolver: delegate a writer (writes: true) told to call"
        f" merge_work with run {child_id} (in its own workspace, a copy of this one, the merge"
        " stops with conflict markers in these files), edit the files to combine both sides,"
        " and commit with git_commit. Then merge the resolver's run: run"
        f" {child_id}'s work comes with it."
    )


def _to_resolve(child_id: int, files: list[str]) -> str:
    shown = "\n".join(f"- {name}" for name in files[:MAX_LISTED])
    if len(files) > MAX_LISTED:
        shown += f"\n- and {len(files) - MAX_LISTED} more"
    return (
        f"Merging run {child_id} stopped at conflicts, left in this workspace to resolve:\n"
        f"{shown}\nEach holds both sides between conflict markers (<<<<<<<, =======, >>>>>>>):"
        " edit them into one version without markers, then commit with git_commit, which"
        f" records the merge. Run {child_id}'s other changes are already in place."
    )


MERGE_WORK = Tool(
    name="merge_work",
    description=(
        "Merge the committed work of a writer sub-agent that has ended (its task's name, or its"
        " run id) into this workspace, as one merge commit. Commit your own changes first. On a"
        " conflict nothing changes and the conflicting files are listed: then delegate a"
        " resolver."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": 64},
            "run": {"type": "integer", "minimum": 1},
        },
        "additionalProperties": False,
    },
    effect=Effect.NON_IDEMPOTENT,
    risk=Risk.WORKSPACE_WRITE,
    min_sandbox_level=1,
    run=_merge,
    probe=_merged,
    subject=lambda arguments: f"run {arguments.get('run', '')}",
)
