"""The demo without any key, from its start to a project that holds the fix: the offline model
fixes the bug and pushes after the owner's approval, the owner pulls from the remote into the
project's own repository, and an offline "run the tests" on the project then finds nothing
failing. A relaunch of the demo starts it offline again, without a key."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from agentos.core.tokens import create_token
from approvals import service
from approvals.models import Approval
from kernel.models import Run
from kernel.worker import Worker
from missions import demo, offline
from missions.errors import MissionError
from missions.launch import create_mission
from missions.models import Mission, Project
from tests.factories import Owner
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def played(run: Run) -> Run:
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    return run


@pytest.mark.timeout(300)
def test_the_demo_s_fix_reaches_the_project_by_a_pull_and_its_tests_pass(
    demo_base: Path, owner: Owner, owner_client: Client
) -> None:
    run = demo.ensure_demo(demo_base)
    assert run is not None
    assert run.contract["offline"] == offline.DEMO  # played offline: relaunched offline
    run = played(run)
    approval = Approval.objects.get(run=run)
    service.decide(approval.pk, approve=True, args_hash=approval.request["args_hash"])
    run = played(run)
    assert run.status == "done", run.error
    project = Project.objects.get(name=demo.PROJECT)
    repo = Path(project.repository)
    remote = demo_base / "calc-remote.git"
    pushed = workspace.host_git(remote, "rev-parse", "main").stdout.strip()
    # The push went to the remote; the project's own repository is as it was.
    assert workspace.host_git(repo, "rev-parse", "HEAD").stdout.strip() != pushed
    assert demo.BUGGY_LINE in (repo / "calc.py").read_text()

    secret = create_token(owner=owner.user, name="script").secret
    answered = Client().post(
        f"/api/v1/projects/{project.pk}/pull",
        content_type="application/json",
        headers={"authorization": f"Bearer {secret}"},
    )

    assert answered.status_code == 200, answered.content
    body = answered.json()
    assert (body["branch"], body["remote"], body["after"], body["moved"]) == (
        "main",
        "origin",
        pushed,
        True,
    )
    assert workspace.host_git(repo, "rev-parse", "HEAD").stdout.strip() == pushed
    assert demo.FIXED_LINE in (repo / "calc.py").read_text()
    assert workspace.host_git(repo, "status", "--porcelain").stdout == ""
    page = owner_client.get(f"/projects/{project.pk}/").content.decode()
    assert f'action="/projects/{project.pk}/pull/"' in page
    again = owner_client.post(f"/projects/{project.pk}/pull/", follow=True)
    assert "main is up to date with origin." in again.content.decode()

    _mission, tests_run = create_mission(project=project, offline="run-tests", trigger="console")
    tests_run = played(tests_run)
    assert tests_run.status == "done", tests_run.error
    assert isinstance(tests_run.output, dict)
    report = str(tests_run.output["answer"])
    assert "Result: the test command passed (exit status 0)." in report
    assert "FAILED" not in report


def test_a_relaunch_of_the_demo_starts_it_offline_again(
    demo_base: Path, owner_client: Client
) -> None:
    run = demo.ensure_demo(demo_base)
    assert run is not None
    first = Mission.objects.get()

    form = owner_client.get(f"/missions/new/?from={first.pk}")
    assert form.context["form"].initial["offline"] == offline.DEMO
    assert 'name="offline" value="demo"' in form.content.decode()

    answered = owner_client.post(
        "/missions/new/", {"project": first.project_id, "offline": "demo", "risk_class": "code"}
    )

    assert answered.status_code == 302, answered.content.decode()[-3000:]
    again = Run.objects.exclude(pk=run.pk).get(parent__isnull=True)
    assert again.contract["offline"] == offline.DEMO
    assert again.input["provider"] == "scripted"
    assert again.input["script"] == demo.SCRIPT


def test_the_demo_s_offline_mission_runs_on_the_demo_project_only(demo_base: Path) -> None:
    other = Project.objects.create(name="shop", repository=str(demo.create_repositories(demo_base)))

    with pytest.raises(MissionError, match="runs on the demo project only"):
        create_mission(project=other, offline=offline.DEMO, trigger="api")
    assert not Mission.objects.exists()
