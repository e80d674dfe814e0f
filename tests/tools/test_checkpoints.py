"""Workspace checkpoints: a write killed between its effect and its result applies once after
the resume, whatever the command; a fork works in its own worktree, equal to the source's at the
fork's step, and leaves the source's untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernel import runs
from kernel.models import Run, Step
from kernel.worker import Worker
from missions.models import Mission
from tests.live import crash_env
from tests.polling import wait_for
from tests.processes import stop
from tests.tools.conftest import FINISH, AgentRun, calls, outputs
from tests.tools.test_demo_mission import in_worktree, start_worker
from tools import checkpoints, workspace
from tools.builtin import CODING_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

APPEND = "echo appended >> log.txt; wc -l < log.txt"


def agent_input(repo: Path, turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "goal": "Do as told.",
        "provider": "scripted",
        "model": "scripted",
        "tools": CODING_TOOLS,
        "script": {"turns": turns},
        "repository": str(repo),
        "checkpoints": True,
    }


def test_a_shell_append_killed_before_its_result_applies_once(
    hostile_mission: tuple[Mission, Path], tmp_path: Path
) -> None:
    mission, repo = hostile_mission
    run = runs.start_run(
        account=mission,
        program="agent",
        input=agent_input(repo, [calls(("shell", {"command": APPEND})), FINISH]),
    )
    # Steps: 1 window, 2 workspace, 3 model, 4 checkpoint, 5 shell, 6 model.
    target = {"run": run.pk, "point": "after_effect_before_result", "seq": 5}
    env = crash_env(tmp_path, [target], AGENTOS_WORKSPACES_DIR=str(workspace.root()))
    killed = start_worker(env)  # appended, killed before recording it
    assert killed.wait(timeout=90) == -9
    assert Step.objects.get(run=run, name="shell").result is None
    worker = start_worker(env)
    try:
        wait_for(
            lambda: Run.objects.get(pk=run.pk).is_terminal,
            timeout=90,
            message="the run to end",
            interval=0.05,
        )
    finally:
        stop(worker)

    run.refresh_from_db()
    assert run.status == "done", run.error
    assert (Path(run.workspace) / "log.txt").read_text() == "appended\n"
    (shell,) = outputs(run, "shell")
    assert shell["output"].startswith("1\n")


def test_a_replayed_write_is_put_back_to_its_checkpoint_first(hostile: AgentRun) -> None:
    run = hostile([calls(("shell", {"command": "echo kept > kept.txt"})), FINISH])
    top = Path(run.workspace)
    before = checkpoints.take(top, run_id=run.pk, label="test")
    (top / "kept.txt").write_text("changed by an attempt that died\n")
    (top / "stray.txt").write_text("created by it\n")

    checkpoints.restore(top, run_id=run.pk, checkpoint=before, stopping=None)

    assert (top / "kept.txt").read_text() == "kept\n"
    assert not (top / "stray.txt").exists()
    assert in_worktree(run, "status", "--porcelain") == "?? kept.txt"  # staging area untouched


def test_a_fork_works_in_its_own_worktree_as_it_was_at_the_fork(hostile: AgentRun) -> None:
    source = hostile(
        [
            calls(("shell", {"command": "echo one > notes.txt"})),
            calls(("git_commit", {"message": "one"})),
            calls(("shell", {"command": "echo two >> notes.txt; echo draft > draft.txt"})),
            calls(("shell", {"command": "echo three >> notes.txt; rm draft.txt"})),
            FINISH,
        ]
    )
    assert source.status == "done", source.error
    second_shell = Step.objects.filter(run=source, name="shell").order_by("seq")[1]
    fork = runs.fork_run(source.pk, at_seq=second_shell.seq)
    Worker(lease_seconds=30).run_until_idle()
    fork.refresh_from_db()

    assert fork.status == "done", fork.error
    mine, theirs = Path(fork.workspace), Path(source.workspace)
    assert mine != theirs
    assert mine.stat().st_uid != theirs.stat().st_uid  # the fork's own uid
    assert (mine / "notes.txt").read_text() == "one\ntwo\nthree\n"  # replayed past the fork
    assert (theirs / "notes.txt").read_text() == "one\ntwo\nthree\n"
    # The fork's own shell found the fork's step's files (draft.txt) and ran on them, not on the
    # source's worktree (which would have "three" twice).
    assert not (mine / "draft.txt").exists()
    assert "No such file" not in outputs(fork, "shell")[-1]["output"]
    assert in_worktree(fork, "rev-parse", "--abbrev-ref", "HEAD") == f"agentos/run-{fork.pk}"
    assert in_worktree(fork, "log", "--format=%s", "-n1") == "one"
    assert in_worktree(source, "rev-parse", "--abbrev-ref", "HEAD") == f"agentos/run-{source.pk}"
