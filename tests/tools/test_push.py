"""What a push sends is exactly what the owner was shown: one commit, its tree and whole message;
never the run's own commits (a secret added then removed, their messages), never a tag."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from approvals import service
from approvals.models import Approval
from cluster.sandbox import for_level
from kernel.models import Run
from kernel.worker import Worker
from missions.models import Mission
from tests.tools.conftest import FINISH, AgentRun, calls, outputs
from tools import bounded_git, workspace

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRETzz\n"
BODY = "A body line the owner must read before approving.\nAnd a second one."


def approve(run: Run) -> dict[str, object]:
    approval = Approval.objects.filter(run=run).order_by("-pk").first()
    assert approval is not None
    assert approval.status == "pending"
    service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    preview: dict[str, object] = approval.request["preview"]
    return preview


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return workspace.host_git(repo, *args, check=check)


def blob_sha(text: str) -> str:
    done = subprocess.run(
        ["git", "hash-object", "--stdin"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def in_worktree(run: Run, *args: str) -> str:
    """git in the run's sandbox, with `.git` writable: what a hostile tool could have done."""
    done = for_level(1).run(
        ["git", *args],
        workdir=Path(run.workspace),
        run_id=run.pk,
        stderr_apart=True,
        git_writable=True,
    )
    assert done.exit_code == 0, done.errors
    return done.output.strip()


def test_it_pushes_one_commit_with_the_tree_and_message_shown_and_never_the_run_s_history(
    hostile_mission: tuple[Mission, Path], hostile: AgentRun, demo_base: Path
) -> None:
    _, repo = hostile_mission
    remote = demo_base / "calc-remote.git"
    before = git(remote, "rev-parse", "main").stdout.strip()
    run = hostile(
        [
            calls(("write_file", {"path": "secret.env", "content": SECRET})),
            calls(("git_commit", {"message": "Add the configuration"})),
            calls(("shell", {"command": "rm secret.env"})),
            calls(("write_file", {"path": "notes.txt", "content": "notes\n"})),
            calls(("git_commit", {"message": f"Add notes\n\n{BODY}"})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    assert run.status == "waiting", run.error
    preview = Approval.objects.get(run=run).request["preview"]
    # What is shown: the one commit, its parent (the run's base), its whole message (without
    # our internal step key), and only what differs from the remote.
    assert preview["parent"] == before
    assert preview["message"] == f"Add notes\n\n{BODY}\n"
    assert preview["head"] == in_worktree(run, "rev-parse", "HEAD")
    assert preview["commit"] != preview["head"]
    assert [(f["path"], f["status"], f["shown"]) for f in preview["files"]] == [
        ("notes.txt", "A", True)
    ]
    assert "commits" not in preview
    assert "SECRET" not in preview["diff"]
    # A tag in the worktree, and a staging repository told to push tags and mirror: none of
    # it rides along.
    in_worktree(run, "tag", "-a", "-m", "annotated", "v-worktree", "HEAD~1")
    stage = workspace.staging(str(repo))
    git(stage, "tag", "-a", "-m", "annotated", "v-staged", preview["commit"])
    git(stage, "tag", "v-light", preview["commit"])
    git(stage, "config", "remote.origin.push", "refs/tags/*:refs/tags/*")
    git(stage, "config", "remote.origin.mirror", "true")
    git(stage, "config", "push.followTags", "true")

    approve(run)

    assert run.status == "done", run.error
    assert outputs(run, "git_push")[0]["output"].startswith(f"Pushed {preview['commit'][:12]}")
    assert git(remote, "rev-parse", "main").stdout.strip() == preview["commit"]
    assert git(remote, "rev-list", f"{before}..main").stdout.split() == [preview["commit"]]
    assert git(remote, "rev-parse", "main^{tree}").stdout.strip() == preview["tree"]
    assert git(remote, "rev-parse", "main^").stdout.strip() == before
    message = git(remote, "cat-file", "commit", "main").stdout.partition("\n\n")[2]
    assert message == preview["message"]
    # The run's own commits, the secret's blob and every message but the shown one: absent.
    assert git(remote, "cat-file", "-e", blob_sha(SECRET), check=False).returncode != 0
    assert git(remote, "cat-file", "-e", preview["head"], check=False).returncode != 0
    assert "Add the configuration" not in git(remote, "log", "--all", "--format=%B").stdout
    assert git(remote, "tag", "--list").stdout == ""
    settings = git(stage, "config", "--get-regexp", "^(remote|push)\\.", check=False).stdout
    assert "push" not in settings
    assert "mirror" not in settings
    assert git(remote, "for-each-ref", "--format=%(refname)").stdout.split() == ["refs/heads/main"]


def test_it_refuses_a_push_whose_worktree_head_moved_since_the_approval(
    hostile: AgentRun, demo_base: Path
) -> None:
    remote = demo_base / "calc-remote.git"
    before = git(remote, "rev-parse", "main").stdout.strip()
    run = hostile(
        [
            calls(("write_file", {"path": "a.txt", "content": "a\n"})),
            calls(("git_commit", {"message": "a"})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    in_worktree(run, "commit", "--quiet", "--allow-empty", "-m", "after the approval")

    approve(run)

    (refused,) = outputs(run, "git_push")
    assert "HEAD moved" in refused["output"]
    assert git(remote, "rev-parse", "main").stdout.strip() == before


def test_the_commit_made_again_from_the_same_head_is_the_same(
    hostile_mission: tuple[Mission, Path], hostile: AgentRun
) -> None:
    from tools import outgoing

    _, repo = hostile_mission
    run = hostile(
        [
            calls(("write_file", {"path": "a.txt", "content": "a\n"})),
            calls(("git_commit", {"message": "a"})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    preview = Approval.objects.get(run=run).request["preview"]
    stage = workspace.staging(str(repo))
    git(stage, "update-ref", "-d", outgoing.ref(run.pk, preview["commit"]))

    again = outgoing.make(stage, run_id=run.pk, head=preview["head"])

    assert again.commit == preview["commit"]
    assert (
        git(stage, "rev-parse", outgoing.ref(run.pk, again.commit)).stdout.strip()
        == (preview["commit"])
    )


def test_the_message_pushed_is_the_text_shown_byte_for_byte(tmp_path: Path) -> None:
    from tools import outgoing

    stage = tmp_path / "stage.git"
    workspace.host_git(tmp_path, "init", "--quiet", "--bare", str(stage))
    tree = git(stage, "mktree", check=True).stdout.strip()
    base = (
        bounded_git.run(stage, "commit-tree", tree, stdin=b"base\n", limit=100).out.decode().strip()
    )
    git(stage, "update-ref", "refs/agentos/run-7/base", base)
    # What a hostile run can write with `git hash-object`: Latin-1, a NUL, our own trailer.
    raw = (
        f"tree {tree}\nparent {base}\n"
        "author a <a@x> 1700000000 +0200\ncommitter c <c@x> 1700000100 +0200\n\n"
    ).encode() + b"Caf\xe9 \x00 done\n\nCo-authored-by: x <x@x>\nAgentos-Step: 7:12\n"
    head = (
        bounded_git.run(
            stage,
            "hash-object",
            "--literally",
            "-t",
            "commit",
            "-w",
            "--stdin",
            stdin=raw,
            limit=100,
        )
        .out.decode()
        .strip()
    )

    made = outgoing.make(stage, run_id=7, head=head)

    assert made.message == "Caf\ufffd \u2400 done\n\nCo-authored-by: x <x@x>\n"
    assert made.parent == base
    pushed = bounded_git.run(stage, "cat-file", "commit", made.commit, limit=4096).out
    header, _, message = pushed.partition(b"\n\n")
    assert message == made.message.encode()
    assert b"author agentos <agent@agentos.invalid> 1700000100 +0200" in header
    assert outgoing.make(stage, run_id=7, head=head).commit == made.commit
