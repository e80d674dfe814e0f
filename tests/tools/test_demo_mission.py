"""The demo mission end to end, with the scripted model: the bug fixed in the sandbox, the fix
committed, and pushed only after the owner approves through the API. Then the same with the
worker SIGKILLed right after the commit, and while the run waits for the approval (and right
after the push): exactly one commit, exactly one push, mission done."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from agentos.core.tokens import create_token
from approvals.models import Approval
from cluster.sandbox import for_level
from kernel.models import Run, Step, StepKind
from kernel.worker import Worker
from missions import demo
from missions.models import Project
from tests.factories import Owner, make_owner, verified_client
from tests.live import crash_env, running_stack
from tests.polling import wait_for
from tests.processes import stop
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)


def remote_head(base: Path) -> str:
    return workspace.host_git(base / "calc-remote.git", "rev-parse", "main").stdout.strip()


def pushes(base: Path) -> int:
    """How many times the remote's main moved (its reflog: the seed push, then ours)."""
    log = workspace.host_git(base / "calc-remote.git", "reflog", "show", "main", check=False).stdout
    return len(log.splitlines())


def in_worktree(run: Run, *args: str) -> str:
    """git in the run's sandbox: the host never runs git on a worktree, tests included."""
    done = for_level(1).run(
        ["git", *args], workdir=Path(run.workspace), run_id=run.pk, stderr_apart=True
    )
    assert done.exit_code == 0, done.errors
    return done.output.strip()


def commits_by_agent(run: Run) -> int:
    return int(in_worktree(run, "rev-list", "--count", f"{workspace.BASE_REF}..HEAD"))


def approve_through_the_api(approval: Approval) -> None:
    secret = create_token(owner=make_owner().user, name="test", scopes=["act", "approve"]).secret
    answered = Client().post(
        f"/api/v1/approvals/{approval.pk}/decision",
        data={"approve": True, "args_hash": approval.request["args_hash"]},
        content_type="application/json",
        headers={"authorization": f"Bearer {secret}"},
    )
    assert answered.status_code == 200, answered.content


def tool_output(run: Run, name: str) -> list[str]:
    steps = Step.objects.filter(run=run, kind=StepKind.TOOL_CALL, name=name).order_by("seq")
    return [step.result["output"] for step in steps if step.result is not None]


def test_the_scripted_agent_fixes_the_bug_and_pushes_only_after_approval(demo_base: Path) -> None:
    run = demo.ensure_demo(demo_base)
    assert run is not None
    before = remote_head(demo_base)
    Worker(lease_seconds=30).run_until_idle()

    run.refresh_from_db()
    assert run.status == "waiting", run.error
    approval = Approval.objects.get(run=run)
    assert approval.status == "pending"
    assert approval.request["tool"] == "git_push"
    assert approval.request["arguments"] == {"remote": "origin", "branch": "main"}
    assert "+    return sum(values) / len(values)" in approval.request["preview"]["diff"]
    # The tests ran in the worktree and left bytecode there; the repository ignores it.
    assert "__pycache__" not in approval.request["preview"]["diff"]
    assert [f["path"] for f in approval.request["preview"]["files"]] == ["calc.py"]
    assert remote_head(demo_base) == before  # nothing pushed without the owner

    tests_runs = tool_output(run, "shell")
    assert "FAILED" in tests_runs[0]
    assert "[exit code 1]" in tests_runs[0]
    assert "OK" in tests_runs[1]
    assert "[exit code 0]" in tests_runs[1]
    assert commits_by_agent(run) == 1

    approve_through_the_api(approval)
    Worker(lease_seconds=30).run_until_idle()

    run.refresh_from_db()
    assert run.status == "done", run.error
    # One commit made from the worktree's HEAD, the one shown: its tree, its message.
    preview = approval.request["preview"]
    assert remote_head(demo_base) == preview["commit"]
    assert preview["head"] == in_worktree(run, "rev-parse", "HEAD")
    assert preview["tree"] == in_worktree(run, "rev-parse", "HEAD^{tree}")
    remote = demo_base / "calc-remote.git"
    pushed = workspace.host_git(remote, "cat-file", "commit", "main").stdout
    assert pushed.partition("\n\n")[2] == preview["message"]
    fixed = workspace.host_git(demo_base / "calc-remote.git", "show", "main:calc.py").stdout
    assert "return sum(values) / len(values)" in fixed
    assert pushes(demo_base) == 2


def test_a_refused_push_never_happens(demo_base: Path, owner_client: Client) -> None:
    from approvals.service import decide

    run = demo.ensure_demo(demo_base)
    assert run is not None
    Worker(lease_seconds=30).run_until_idle()
    approval = Approval.objects.get(run=run)
    decide(approval.pk, approve=False, args_hash=approval.request["args_hash"], note="not today")
    Worker(lease_seconds=30).run_until_idle()

    run.refresh_from_db()
    (refusal,) = tool_output(run, "git_push")
    assert "the owner refused: not today" in refusal
    assert pushes(demo_base) == 1
    # The model read the refusal: its answer says what happened, and the engine ends the run
    # from that answer.
    assert isinstance(run.output, dict)
    answer = run.output["answer"]
    assert "was not pushed to origin main" in answer
    assert "the owner refused: not today" in answer
    assert "committed and pushed" not in answer
    # Not done: the push it set out to make did not happen, and the run says why.
    assert run.status == "blocked", (run.status, run.output)
    assert run.output["reason"] == (
        "git_push did not happen: Refused: git_push the owner refused: not today."
    )
    # The model quoted the refusal as it read it, in a data block: the owner reads no markup.
    assert not re.search(r"</?data-[0-9a-f]{16}", answer), answer
    page = owner_client.get(reverse("console:run", args=[run.pk]))
    assert page.status_code == 200
    shown = re.search(rb"&lt;/?data-[0-9a-f]{16}", page.content)
    assert shown is None, page.content[shown.start() - 600 : shown.end() + 200]


def test_a_push_the_remote_refuses_does_not_end_the_run_done(demo_base: Path) -> None:
    run = demo.ensure_demo(demo_base)
    assert run is not None
    Worker(lease_seconds=30).run_until_idle()
    # Someone else moved the remote's main meanwhile: the push is not a fast-forward.
    remote = demo_base / "calc-remote.git"
    tree = workspace.host_git(remote, "rev-parse", "main^{tree}").stdout.strip()
    moved = workspace.host_git(
        remote, "commit-tree", tree, "-p", "main", "-m", "Elsewhere"
    ).stdout.strip()
    workspace.host_git(remote, "update-ref", "refs/heads/main", moved)
    approve_through_the_api(Approval.objects.get(run=run))
    Worker(lease_seconds=30).run_until_idle()

    run.refresh_from_db()
    (refusal,) = tool_output(run, "git_push")
    assert refusal.startswith("Push refused by origin: "), refusal
    assert remote_head(demo_base) == moved
    assert run.status == "blocked", (run.status, run.output)
    assert isinstance(run.output, dict)
    assert run.output["reason"].startswith("git_push did not happen: Push refused by origin: ")
    assert not re.search(r"</?data-[0-9a-f]{16}", run.output["answer"]), run.output["answer"]


# --- the same mission with the worker killed --------------------------------------------------


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "kernel_worker",
            "--lease",
            "2",
            "--poll",
            "0.2",
        ],
        env=env,
    )


def seq_of(run: Run, name: str) -> int:
    return Step.objects.get(run=run, name=name).seq


@pytest.mark.timeout(300)  # measured 24 s, over the 120 s default's third
def test_killed_after_the_commit_and_while_waiting_one_commit_one_push(
    demo_base: Path, tmp_path: Path
) -> None:
    run = demo.ensure_demo(demo_base)
    assert run is not None
    # Steps, as the script plays them: 1 window, 2 workspace, 3 resume routine, 4 model, 5-7
    # reads, 8 model, 9 checkpoint, 10 shell, 11 model, 12 checkpoint, 13 edit, 14 model,
    # 15 checkpoint, 16 shell, 17 model, 18 checkpoint, 19 commit; killed, claimed again: 20 the
    # resume routine, 21 model, 22 approval request, 23 the wait, 24 push, 25 the resume routine
    # (claimed again after the kill), 26 model.
    commit, wait, push = 19, 23, 24
    targets = [
        {"run": run.pk, "point": "after_effect_before_result", "seq": commit},
        {"run": run.pk, "point": "wait_recorded", "seq": wait},
        {"run": run.pk, "point": "after_effect_before_result", "seq": push},
    ]
    env = crash_env(tmp_path, targets, AGENTOS_WORKSPACES_DIR=str(workspace.root()))
    killed = start_worker(env)  # dies after committing, before recording it
    assert killed.wait(timeout=90) == -9
    assert seq_of(run, "git_commit") == commit
    killed = start_worker(env)  # the commit's probe finds it; dies once the wait is recorded
    assert killed.wait(timeout=90) == -9
    worker = start_worker(env)
    try:
        wait_for(
            lambda: Approval.objects.filter(run=run).exists(),
            timeout=90,
            message="the approval",
            interval=0.05,
        )
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == "waiting",
            timeout=90,
            message="the run to wait",
            interval=0.05,
        )
        approve_through_the_api(Approval.objects.get(run=run))
        assert worker.wait(timeout=90) == -9  # pushed, killed before recording it
        worker = start_worker(env)
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
    assert seq_of(run, "git_push") == push
    # Made again after the crash, the commit is the same: the probe found the approved one.
    assert remote_head(demo_base) == Approval.objects.get(run=run).request["preview"]["commit"]
    assert commits_by_agent(run) == 1
    assert pushes(demo_base) == 2
    assert run.account.runs.get().status == "done"


@pytest.mark.timeout(300)  # measured 20 s; it waits up to 180 s for the demo's approval
def test_make_run_shows_the_demo_waiting_for_approval_on_home(
    seeded_catalog: None, tmp_path: Path
) -> None:
    """What `make run` does on a fresh database: the owner is created, the demo mission starts,
    and its push waits for the owner on Home — within the three minutes the issue allows."""
    started = time.monotonic()
    with running_stack(tmp_path, demo=True) as stack:
        wait_for(
            lambda: Approval.objects.filter(state="open").exists(),
            timeout=180,
            message="the demo's approval",
            interval=0.05,
        )
        assert "Demo mission started, played by the offline scripted model" in stack.log()
        owner = User.objects.get()
        page = verified_client(Owner(user=owner, credentials=None)).get("/")  # type: ignore[arg-type]
    assert time.monotonic() - started < 180
    approval = Approval.objects.get()
    assert approval.request["tool"] == "git_push"
    assert page.status_code == 200
    assert f"/approvals/{approval.pk}/" in page.content.decode()
    # The stack's workspaces live under its own data directory's key in /var/lib/agentos.
    shutil.rmtree(Path(Project.objects.get().repository).parent.parent, ignore_errors=True)
