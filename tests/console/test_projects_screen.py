"""The Projects screen: the owner's repositories, adding one (validated as through the API), and
a project's missions, push credentials (never shown) and worktrees with how long each is kept."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from kernel import runs
from kernel.models import Run, RunStatus
from missions.models import Mission, Project
from tools.models import CredentialKind, RemoteCredential

pytestmark = pytest.mark.django_db


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    path = tmp_path / "site"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def test_it_adds_a_project_and_lists_it(owner_client: Client, repository: Path) -> None:
    response = owner_client.post(
        "/projects/",
        {"name": "site", "repository": str(repository), "description": "The public site."},
    )

    project = Project.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/projects/{project.pk}/"
    assert project.repository == str(repository)
    listing = owner_client.get("/projects/").content.decode()
    assert f'href="/projects/{project.pk}/"' in listing
    assert str(repository) in listing


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "", "repository": ""}, "This field is required."),
        ({"name": "relative", "repository": "some/dir"}, "absolute path"),
        ({"name": "plain dir", "repository": "/tmp"}, "is not a git repository"),  # noqa: S108
        ({"name": "taken", "repository": ""}, "already exists"),
    ],
)
def test_it_refuses_a_bad_project_with_the_fields_message_and_writes_nothing(
    owner_client: Client, data: dict[str, str], message: str
) -> None:
    Project.objects.create(name="taken")

    response = owner_client.post("/projects/", data)

    assert response.status_code in (400, 422)
    assert message in response.content.decode()
    assert Project.objects.count() == 1


def test_a_project_shows_its_missions_credentials_and_worktrees_with_their_keeping(
    owner_client: Client, repository: Path, settings: object
) -> None:
    project = Project.objects.create(name="site", repository=str(repository))
    mission = Mission.objects.create(project=project, goal="Fix the footer links.")
    Mission.objects.create(project=Project.objects.create(name="other"), goal="Elsewhere.")
    ended = runs.start_run(account=mission, program="agent", workspace="/data/worktrees/run-1")
    Run.objects.filter(pk=ended.pk).update(
        status=RunStatus.FAILED, finished_at=timezone.now() - timedelta(days=1)
    )
    going = runs.start_run(account=mission, program="agent", workspace="/data/worktrees/run-2")
    RemoteCredential.objects.create(
        project=project, remote="origin", kind=CredentialKind.TOKEN, ciphertext=b"gAAAA-secret"
    )

    content = owner_client.get(f"/projects/{project.pk}/").content.decode()

    assert "Fix the footer links." in content
    assert "Elsewhere." not in content
    assert f'href="/runs/{ended.pk}/"' in content
    assert "kept until" in content
    assert f'href="/runs/{going.pk}/"' in content
    assert "kept while the run goes on" in content
    assert "origin" in content
    assert "gAAAA-secret" not in content
    assert owner_client.get("/projects/999999/").status_code == 404


def test_it_is_for_the_signed_in_owner_only(client: Client) -> None:
    assert client.get("/projects/").status_code == 302
    assert client.post("/projects/", {"name": "x"}).status_code == 302
    assert not Project.objects.exists()
