"""Worktrees are kept while they may be needed and removed after: days after the run ended, or at
once when everything the run committed is pushed. The console says which."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.conf import settings
from django.test import Client
from django.utils import timezone

from agentos.core.tokens import create_token
from approvals import service
from approvals.models import Approval
from kernel import runs
from kernel.models import Event, Run
from kernel.worker import Worker
from tests.factories import Owner
from tests.tools.conftest import FINISH, AgentRun, calls
from tools import retention, workspace

pytestmark = pytest.mark.django_db(transaction=True)


def staging_refs(repo: Path, run_id: int) -> list[str]:
    stage = workspace.staging(str(repo))
    listed = workspace.host_git(stage, "for-each-ref", "--format=%(refname)", "refs/agentos/")
    return [ref for ref in listed.stdout.split() if ref.startswith(f"refs/agentos/run-{run_id}/")]


def test_a_worktree_is_kept_for_days_then_removed(
    hostile: AgentRun, hostile_mission: tuple[object, Path], owner: Owner, owner_client: Client
) -> None:
    run = hostile([calls(("write_file", {"path": "work.txt", "content": "unpushed\n"})), FINISH])
    path = Path(run.workspace)
    assert run.status == "done"
    assert retention.sweep() == []  # not pushed: kept
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert "kept until" in page

    later = timezone.now() + timedelta(days=settings.WORKTREE_DAYS, minutes=1)
    with time_machine.travel(later):
        assert retention.sweep() == [run.pk]
    run.refresh_from_db()
    assert run.workspace == ""
    assert not path.exists()
    assert not path.with_name(path.name + workspace.READY).exists()
    assert staging_refs(hostile_mission[1], run.pk) == []
    assert Event.objects.filter(run=run, kind="run.workspace_removed").exists()
    assert "removed (its journal stays)" in owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert retention.sweep() == []  # idempotent

    # No fork is offered, and one asked for is refused before anything is queued.
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert "?fork=" not in page
    assert "it can no longer be forked" in page
    assert 'id="fork"' not in owner_client.get(f"/runs/{run.pk}/?fork=3").content.decode()
    refused = owner_client.post(f"/runs/{run.pk}/fork/", {"seq": "3", "confirm": "yes"})
    assert refused.status_code == 409
    assert f"Run {run.pk} cannot be forked: its worktree was removed" in refused.content.decode()
    secret = create_token(owner=owner.user, name="test").secret
    answered = Client().post(
        f"/api/v1/runs/{run.pk}/fork",
        data={"at_seq": 3},
        content_type="application/json",
        headers={"authorization": f"Bearer {secret}"},
    )
    assert answered.status_code == 409, answered.content
    assert answered.json()["error"]["code"] == "worktree_removed"
    assert "Relaunch the mission instead." in answered.json()["error"]["message"]
    assert Run.objects.filter(contract__forked_from__run=run.pk).count() == 0


def test_a_run_whose_worktree_is_kept_forks(hostile: AgentRun, owner_client: Client) -> None:
    run = hostile([calls(("write_file", {"path": "work.txt", "content": "kept\n"})), FINISH])
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/?fork=3#fork"' in page
    fork = runs.fork_run(run.pk, at_seq=3)
    Worker(lease_seconds=30).run_until_idle()
    fork.refresh_from_db()
    assert fork.status == "done", fork.error


def test_a_worktree_whose_work_is_pushed_goes_at_the_next_sweep(hostile: AgentRun) -> None:
    run = hostile(
        [
            calls(("write_file", {"path": "work.txt", "content": "pushed\n"})),
            calls(("git_commit", {"message": "work"})),
            calls(("git_push", {"remote": "origin", "branch": "main"})),
            FINISH,
        ]
    )
    approval = Approval.objects.get(run=run)
    service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    assert run.status == "done", run.error
    assert retention.keeping(run).pushed
    assert retention.sweep() == [run.pk]
    assert not Path(workspace.root() / "worktrees" / f"run-{run.pk}").exists()
