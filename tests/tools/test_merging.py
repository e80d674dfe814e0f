"""Isolated writers: each sub-agent that writes works in a repository of its own, made from its
parent's checkpoint, and the parent merges their work inside its sandbox (`merge_work`) — once,
whatever dies when; a conflict changes nothing and is handed back to be delegated.

The children are started here by a small test tool that does what delegation does for a writer
(a journaled checkpoint of the parent's worktree, one spawn step per child with the checkpoint
in its contract, a durable join), so these tests need nothing of the delegating tool itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from approvals import service
from approvals.models import Question
from cluster.sandbox import for_level
from kernel import runs
from kernel.context import Done, RunContext, StepCall
from kernel.journal import Fence
from kernel.models import Effect, Run, Step, StepKind
from kernel.worker import Worker
from missions.models import Mission
from tests.live import crash_env
from tests.polling import wait_for
from tests.processes import stop
from tests.tools.conftest import FINISH, calls, outputs
from tests.tools.test_demo_mission import in_worktree, start_worker
from tools import checkpoints, registry, workspace
from tools.base import Risk, Tool, ToolEnv, ToolError, Worksite, text_of
from tools.builtin import CODING_TOOLS, MERGING_TOOLS
from tools.merging import MERGE_WORK, TRAILER

pytestmark = pytest.mark.django_db(transaction=True)

ENVELOPE = json.dumps(
    {
        "status": "done",
        "payload": {},
        "artifacts": [],
        "evidence": {"commands": [], "tests": [], "sources": []},
        "open_questions": [],
    }
)
CHILD_DONE = {"text": ENVELOPE}


def _spawn_writers(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    top = worksite.workspace
    assert top is not None

    def take(call: StepCall) -> Done:
        label = f"delegate-{call.seq}"
        return Done(checkpoints.take(top, run_id=ctx.run_id, label=label, stopping=call.stopping))

    start = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name="delegate-checkpoint",
        request={},
        execute=take,
    )
    repository = ctx.input["repository"]
    ids = [
        ctx.spawn("agent", child_input(repository, child["name"], start, child["turns"]))
        for child in arguments["children"]
    ]
    ctx.join(ids)
    return f"Writers ended: {ids}"


SPAWN_WRITERS = Tool(
    name="spawn_writers",
    description="Start writer sub-agents and wait for them (tests only).",
    input_schema={"type": "object"},
    effect=Effect.READ,
    risk=Risk.READ,
    run=lambda env, arguments: "",
    interact=_spawn_writers,
)
registry.TOOLS.add(SPAWN_WRITERS.name, SPAWN_WRITERS)


def child_input(
    repository: str, name: str, start: dict[str, Any], turns: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "goal": f"Writer {name}: do as told.",
        "provider": "scripted",
        "model": "scripted",
        "tools": CODING_TOOLS,
        "script": {"turns": turns},
        "repository": repository,
        "checkpoints": True,
        "contract": {"name": name, "base_checkpoint": start},
    }


def parent_input(
    repo: Path, turns: list[dict[str, Any]], *, extra: tuple[str, ...] = ("spawn_writers",)
) -> dict[str, Any]:
    return {
        "goal": "Split the work between writers and merge it.",
        "provider": "scripted",
        "model": "scripted",
        "tools": [*CODING_TOOLS, *MERGING_TOOLS, *extra],
        "script": {"turns": turns},
        "repository": str(repo),
        "checkpoints": True,
    }


def two_writers(mission: Mission, repo: Path) -> tuple[Run, list[int]]:
    """A parent that commits a file, leaves another uncommitted, starts writers `a` and `b`
    (each adds its own file and commits), commits its draft, then merges a, then b. Its run
    starts queued; the writers' ids are the next two (checked once they exist)."""
    parent = runs.start_run(account=mission, program="agent", input={"goal": "placeholder"})
    a, b = parent.pk + 1, parent.pk + 2
    writer = [
        calls(("shell", {"command": "cat committed.txt draft.txt"})),
        None,  # its own file
        calls(("git_commit", {"message": "writer work"})),
        CHILD_DONE,
    ]
    turns = [
        calls(
            ("write_file", {"path": "committed.txt", "content": "committed by the parent\n"}),
            ("git_commit", {"message": "parent: committed"}),
        ),
        calls(("write_file", {"path": "draft.txt", "content": "not committed yet\n"})),
        calls(
            (
                "spawn_writers",
                {
                    "children": [
                        {"name": name, "turns": [*writer[:1], own(name), *writer[2:]]}
                        for name in ("a", "b")
                    ]
                },
            )
        ),
        calls(("git_commit", {"message": "parent: draft"})),
        calls(("merge_work", {"run": a})),
        calls(("merge_work", {"task": "b"})),  # by its task's name, as a model knows it
        FINISH,
    ]
    Run.objects.filter(pk=parent.pk).update(input=parent_input(repo, turns))
    return parent, [a, b]


def own(name: str) -> dict[str, Any]:
    return calls(("write_file", {"path": f"{name}.txt", "content": f"written by {name}\n"}))


def test_two_writers_from_the_parents_checkpoint_are_merged_one_after_the_other(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    parent, (a, b) = two_writers(mission, repo)

    Worker(lease_seconds=30).run_until_idle()

    parent.refresh_from_db()
    assert parent.status == "done", parent.error
    children = {run.pk: run for run in Run.objects.filter(parent=parent)}
    assert sorted(children) == [a, b]
    for child in children.values():
        assert child.status == "done", child.error
        mine = Path(child.workspace)
        assert mine.name == f"run-{child.pk}"
        assert mine.stat().st_uid != Path(parent.workspace).stat().st_uid  # its own uid
        # The parent's committed and uncommitted files, as they were at the checkpoint.
        (shown,) = outputs(child, "shell")
        assert "committed by the parent\nnot committed yet\n" in shown["output"]
        branch = in_worktree(child, "rev-parse", "--abbrev-ref", "HEAD")
        assert branch == f"agentos/run-{child.pk}"
        assert in_worktree(child, "log", "--format=%s", "-n2").splitlines() == [
            "writer work",
            "parent: committed",
        ]

    merged = [result["output"] for result in outputs(parent, "merge_work")]
    assert merged[0].startswith(f"Merged run {a} into this workspace: "), merged
    assert merged[1].startswith(f"Merged run {b} into this workspace: "), merged
    top = Path(parent.workspace)
    for name, text in {
        "a.txt": "written by a\n",
        "b.txt": "written by b\n",
        "committed.txt": "committed by the parent\n",
        "draft.txt": "not committed yet\n",
    }.items():
        assert (top / name).read_text() == text
    assert in_worktree(parent, "status", "--porcelain") == ""
    subjects = in_worktree(parent, "log", "--merges", "--format=%s").splitlines()
    assert subjects == [f"Merge the work of run {b} (b)", f"Merge the work of run {a} (a)"]
    assert in_worktree(parent, "rev-parse", "--abbrev-ref", "HEAD") == f"agentos/run-{parent.pk}"


@pytest.mark.timeout(300)  # measured 28 s; each killed worker may take 120 s to die
def test_killed_while_making_a_writer_and_after_a_merge_each_happens_once(
    hostile_mission: tuple[Mission, Path], tmp_path: Path
) -> None:
    """Worker processes SIGKILLed after a writer's worktree was made (before its step's result)
    and after the parent's first merge (before its result): the writer's worktree is found
    again, the merge is found by the probe, and each merge commit exists once."""
    mission, repo = hostile_mission
    parent = runs.start_run(account=mission, program="agent", input={"goal": "placeholder"})
    a, b = parent.pk + 1, parent.pk + 2
    turns = [
        calls(
            ("write_file", {"path": "committed.txt", "content": "committed by the parent\n"}),
            ("git_commit", {"message": "parent: committed"}),
        ),
        calls(("write_file", {"path": "draft.txt", "content": "not committed yet\n"})),
        calls(("ask_owner", {"question": "Are the writers done?"})),
        calls(("git_commit", {"message": "parent: draft"})),
        calls(("merge_work", {"run": a})),
        calls(("merge_work", {"run": b})),
        FINISH,
    ]
    # Worker processes know no test tool: the test starts the writers, as delegation would.
    Run.objects.filter(pk=parent.pk).update(input=parent_input(repo, turns, extra=()))
    Worker(lease_seconds=30).run_until_idle()  # up to the owner's question
    parent.refresh_from_db()
    assert parent.status == "waiting", parent.error
    start = checkpoints.take(Path(parent.workspace), run_id=parent.pk, label="delegate")
    for offset, name in enumerate(("a", "b"), start=1):
        turns = [own(name), calls(("git_commit", {"message": f"writer {name}"})), CHILD_DONE]
        child = runs.spawn_child(
            parent=parent,
            seq=1000 + offset,
            program="agent",
            input=child_input(str(repo), name, start, turns),
            caps={},
        )
        assert child.pk == parent.pk + offset
    # Steps of the parent: 1 workspace, 2 window, 3 model, 4-7 two writes, 8 model, 9-10 a
    # write, 11 model, 12 the question, 13 model, 14-15 the commit, 16 model, 17 checkpoint,
    # 18 merge_work.
    merge = 18
    targets = [
        {"run": a, "point": "after_effect_before_result", "seq": 1},
        {"run": parent.pk, "point": "after_effect_before_result", "seq": merge},
    ]
    env = crash_env(tmp_path, targets, AGENTOS_WORKSPACES_DIR=str(workspace.root()))
    killed = start_worker(env)  # writer a's worktree made, killed before its step's result
    assert killed.wait(timeout=120) == -9
    worker = start_worker(env)
    try:
        wait_for(
            lambda: all(Run.objects.get(pk=pk).is_terminal for pk in (a, b)),
            timeout=90,
            message="the writers",
            interval=0.05,
        )
        service.answer(Question.objects.get(run=parent).pk, text="They are.")
        assert worker.wait(timeout=120) == -9  # merged a, killed before its result
        worker = start_worker(env)
        wait_for(
            lambda: Run.objects.get(pk=parent.pk).is_terminal,
            timeout=90,
            message="the parent to end",
            interval=0.05,
        )
    finally:
        stop(worker)

    parent.refresh_from_db()
    assert parent.status == "done", parent.error
    for pk in (a, b):
        child = Run.objects.get(pk=pk)
        assert child.status == "done", child.error
        assert Path(child.workspace).name == f"run-{pk}"
    fired = sorted(path.name for path in (tmp_path / "fired").iterdir())
    assert fired == sorted(f"{t['run']}-{t['point']}-{t['seq']}" for t in targets)
    # Writer a's worktree step ran again after the kill: the one it made was found, complete.
    assert in_worktree(Run.objects.get(pk=a), "log", "--format=%s", "-n2").splitlines() == [
        "writer a",
        "parent: committed",
    ]
    first = Step.objects.get(run=parent, seq=merge)
    assert (first.name, first.settled_by) == ("merge_work", "probe")
    merged = [result["output"] for result in outputs(parent, "merge_work")]
    assert merged[0].startswith(f"Merged run {a} into this workspace: "), merged
    assert merged[1].startswith(f"Merged run {b} into this workspace: "), merged
    log = in_worktree(parent, "log", "--merges", "--format=%B")
    assert log.count(f"{TRAILER}: run-{a}") == 1
    assert log.count(f"{TRAILER}: run-{b}") == 1
    top = Path(parent.workspace)
    assert (top / "a.txt").read_text() == "written by a\n"
    assert (top / "b.txt").read_text() == "written by b\n"
    assert in_worktree(parent, "status", "--porcelain") == ""


# --- The tool alone, on runs made here ----------------------------------------------------------


def tool_env(run: Run, *, replay: bool = False) -> ToolEnv:
    call = StepCall(
        run_id=run.pk,
        seq=1000,
        idempotency_key=f"test-{run.pk}",
        request={},
        replay=replay,
        stopping=threading.Event(),
        fence=Fence(run.pk, 0),
    )
    return ToolEnv(call, run.pk, None, Path(run.workspace))


def in_sandbox(run: Run, script: str) -> str:
    """A shell script in the run's sandbox with `.git` writable, as the git tools have it."""
    done = for_level(1).run(
        ["/bin/sh", "-c", script],
        workdir=Path(run.workspace),
        run_id=run.pk,
        git_writable=True,
        stderr_apart=True,
    )
    assert done.exit_code == 0, done.errors
    return done.output


def finished_parent(mission: Mission, repo: Path) -> Run:
    turns = [
        calls(
            ("write_file", {"path": "shared.txt", "content": "as it was\n"}),
            ("git_commit", {"message": "parent: shared"}),
        ),
        FINISH,
    ]
    parent = runs.start_run(account=mission, program="agent", input=parent_input(repo, turns))
    Worker(lease_seconds=30).run_until_idle()
    parent.refresh_from_db()
    assert parent.status == "done", parent.error
    return parent


def writer(parent: Run, seq: int, turns: list[dict[str, Any]]) -> Run:
    """A writer child of `parent`, from a checkpoint of its worktree now, run to its end."""
    start = checkpoints.take(Path(parent.workspace), run_id=parent.pk, label=f"delegate-{seq}")
    child = runs.spawn_child(
        parent=parent,
        seq=seq,
        program="agent",
        input=child_input(parent.input["repository"], f"w{seq}", start, turns),
        caps={},
    )
    Worker(lease_seconds=30).run_until_idle()
    child.refresh_from_db()
    assert child.status == "done", child.error
    return child


def snapshot(top: Path) -> dict[str, str]:
    """Every file of the worktree (`.git` included, but its index's stat cache), by hash."""
    found = {}
    for here, _dirs, names in os.walk(top):
        for name in names:
            path = Path(here) / name
            relative = str(path.relative_to(top))
            if relative in (".git/index", ".git/agentos-checkpoint.index"):
                continue
            if path.is_symlink():
                found[relative] = "-> " + str(path.readlink())
            else:
                found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_a_conflict_is_refused_with_its_files_and_leaves_the_tree_as_it_was(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    parent = finished_parent(mission, repo)
    child = writer(
        parent,
        100,
        [
            calls(("shell", {"command": 'echo "the child\'s" > shared.txt'})),
            calls(("write_file", {"path": "other.txt", "content": "only the child's\n"})),
            calls(("git_commit", {"message": "child: shared"})),
            CHILD_DONE,
        ],
    )
    in_sandbox(parent, "echo \"the parent's\" > shared.txt && git commit -qam 'parent: changed'")
    head = in_worktree(parent, "rev-parse", "HEAD")
    before = snapshot(Path(parent.workspace))

    with pytest.raises(ToolError) as refused:
        text_of(MERGE_WORK.run(tool_env(parent), {"run": child.pk}))

    message = str(refused.value)
    assert "Merge conflict" in message
    assert "- shared.txt" in message
    assert "other.txt" not in message  # it merged cleanly: not a conflict
    assert f"call merge_work with run {child.pk}" in message
    after = snapshot(Path(parent.workspace))
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    # Only git's own records of the attempt changed (the child's commits, fetched, kept for the
    # resolver to read; the abort's ORIG_HEAD); every working file is byte-identical.
    assert all(name.startswith(".git/") for name in changed), changed
    assert in_worktree(parent, "rev-parse", "HEAD") == head
    assert in_worktree(parent, "status", "--porcelain") == ""
    assert not (Path(parent.workspace) / "other.txt").exists()
    assert (Path(parent.workspace) / "shared.txt").read_text() == "the parent's\n"
    # The other side is there for a resolver to read.
    shown = in_worktree(parent, "show", f"refs/agentos/children/run-{child.pk}:shared.txt")
    assert shown == "the child's"


def test_a_merge_replayed_after_its_effect_is_not_made_twice(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    parent = finished_parent(mission, repo)
    child = writer(
        parent,
        100,
        [
            calls(("write_file", {"path": "feature.txt", "content": "the feature\n"})),
            calls(("git_commit", {"message": "child: feature"})),
            CHILD_DONE,
        ],
    )
    assert MERGE_WORK.probe is not None
    assert MERGE_WORK.probe(tool_env(parent, replay=True), {"run": child.pk}) is None

    first = text_of(MERGE_WORK.run(tool_env(parent), {"run": child.pk}))

    head = in_worktree(parent, "rev-parse", "HEAD")
    assert first.startswith(f"Merged run {child.pk} into this workspace: {head[:12]} (1 commit)")
    found = MERGE_WORK.probe(tool_env(parent, replay=True), {"run": child.pk})
    assert found == f"Merged run {child.pk} into this workspace: {head[:12]}."
    # Run again anyway (a replay the probe did not settle): the work is there, nothing made.
    again = text_of(MERGE_WORK.run(tool_env(parent, replay=True), {"run": child.pk}))
    assert again.startswith(f"Run {child.pk}'s work is already in this workspace")
    assert in_worktree(parent, "rev-parse", "HEAD") == head
    merges = in_worktree(parent, "log", "--merges", "--format=%B", "HEAD")
    assert merges.count(f"{TRAILER}: run-{child.pk}") == 1


def test_a_replay_after_a_merge_cut_short_undoes_it_then_merges_once(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    parent = finished_parent(mission, repo)
    child = writer(
        parent,
        100,
        [
            calls(("write_file", {"path": "feature.txt", "content": "the feature\n"})),
            calls(("git_commit", {"message": "child: feature"})),
            CHILD_DONE,
        ],
    )
    # A merge killed after it wrote the index and the files, before its commit: a stale lock
    # and an index holding the merge (the harness has put the files back to its checkpoint).
    start = checkpoints.take(Path(parent.workspace), run_id=parent.pk, label="before-merge")
    in_sandbox(parent, "echo partial > feature.txt && git add feature.txt && touch .git/index.lock")
    checkpoints.restore(Path(parent.workspace), run_id=parent.pk, checkpoint=start, stopping=None)

    merged = text_of(MERGE_WORK.run(tool_env(parent, replay=True), {"run": child.pk}))

    assert merged.startswith(f"Merged run {child.pk} into this workspace: "), merged
    assert (Path(parent.workspace) / "feature.txt").read_text() == "the feature\n"
    assert in_worktree(parent, "status", "--porcelain") == ""


def test_only_an_ended_writer_child_of_this_run_is_merged(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    parent = finished_parent(mission, repo)
    stranger = finished_parent(mission, repo)
    child = writer(
        parent,
        100,
        [
            calls(("write_file", {"path": "feature.txt", "content": "the feature\n"})),
            calls(("git_commit", {"message": "child: feature"})),
            CHILD_DONE,
        ],
    )
    head = in_worktree(stranger, "rev-parse", "HEAD")

    with pytest.raises(ToolError, match="is not a sub-agent of this run"):
        text_of(MERGE_WORK.run(tool_env(stranger), {"run": child.pk}))
    with pytest.raises(ToolError, match="is not a sub-agent of this run"):
        text_of(MERGE_WORK.run(tool_env(parent), {"run": stranger.pk}))
    with pytest.raises(ToolError, match="no sub-agent of this run was given a task named 'w100'"):
        text_of(MERGE_WORK.run(tool_env(stranger), {"task": "w100"}))
    with pytest.raises(ToolError, match="by its task or by its run, not both"):
        text_of(MERGE_WORK.run(tool_env(parent), {"task": "w100", "run": child.pk}))
    with pytest.raises(ToolError, match="Say whose work to merge"):
        text_of(MERGE_WORK.run(tool_env(parent), {}))
    waiting = runs.spawn_child(
        parent=parent, seq=200, program="agent", input={"goal": "later"}, caps={}
    )
    with pytest.raises(ToolError, match="has not ended yet"):
        text_of(MERGE_WORK.run(tool_env(parent), {"run": waiting.pk}))

    assert in_worktree(stranger, "rev-parse", "HEAD") == head
    assert not (Path(stranger.workspace) / "feature.txt").exists()


def test_a_dirty_parent_is_told_to_commit_first(hostile_mission: tuple[Mission, Path]) -> None:
    mission, repo = hostile_mission
    parent = finished_parent(mission, repo)
    child = writer(
        parent,
        100,
        [
            calls(("write_file", {"path": "feature.txt", "content": "the feature\n"})),
            calls(("git_commit", {"message": "child: feature"})),
            CHILD_DONE,
        ],
    )
    in_sandbox(parent, "echo edited >> shared.txt")

    with pytest.raises(ToolError, match=r"uncommitted changes(.|\n)*shared\.txt"):
        text_of(MERGE_WORK.run(tool_env(parent), {"run": child.pk}))

    assert (Path(parent.workspace) / "shared.txt").read_text() == "as it was\nedited\n"
    assert not (Path(parent.workspace) / "feature.txt").exists()


def test_a_writer_that_committed_nothing_has_nothing_to_merge(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    parent = finished_parent(mission, repo)
    child = writer(
        parent,
        100,
        [
            calls(("write_file", {"path": "forgotten.txt", "content": "never committed\n"})),
            CHILD_DONE,
        ],
    )

    answer = text_of(MERGE_WORK.run(tool_env(parent), {"run": child.pk}))

    assert answer.startswith(f"Run {child.pk} committed nothing: nothing to merge.")
    assert "left changes it did not commit, which are not merged: forgotten.txt" in answer
