"""The project page's environment: the owner saves setup commands (pinning the default branch
head and building them) or presses Rebuild, and sees the version, the commit and the build's
outcome; refusals are said on the page and write nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.test import Client

from missions.models import Project
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    path = tmp_path / "site"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "notes.txt").write_text("first\n")
    workspace.host_git(path, "add", "notes.txt")
    workspace.host_git(path, "commit", "--quiet", "-m", "first")
    return Project.objects.create(name="site", repository=str(path))


def test_saving_the_commands_builds_them_and_shows_the_outcome(
    owner_client: Client, project: Project
) -> None:
    saved = owner_client.post(
        f"/projects/{project.pk}/environment/", {"setup": "mkdir -p /env && cp notes.txt /env/"}
    )

    assert saved.status_code == 302
    project.refresh_from_db()
    assert project.environment_status == "built", project.environment_log
    content = owner_client.get(f"/projects/{project.pk}/").content.decode()
    assert project.environment_version in content
    assert project.environment_commit[:12] in content
    assert "Rebuild environment" in content
    assert "data-environment-status>Built<" in content


def test_a_failed_build_shows_its_output(owner_client: Client, project: Project) -> None:
    owner_client.post(f"/projects/{project.pk}/environment/", {"setup": "echo nope >&2; exit 2"})

    content = owner_client.get(f"/projects/{project.pk}/").content.decode()

    assert "data-environment-status>Failed<" in content
    assert "nope" in content


def test_rebuild_without_commands_is_refused_on_the_page(
    owner_client: Client, project: Project
) -> None:
    answer = owner_client.post(f"/projects/{project.pk}/environment/rebuild/", follow=True)

    assert "no environment setup commands" in answer.content.decode()
    project.refresh_from_db()
    assert project.environment_status == "none"


def test_commands_too_long_are_refused_with_the_fields_message(
    owner_client: Client, project: Project
) -> None:
    answer = owner_client.post(f"/projects/{project.pk}/environment/", {"setup": "x" * 20_001})

    assert answer.status_code == 400
    assert "at most 20000 characters" in answer.content.decode()
    project.refresh_from_db()
    assert project.environment_setup == ""


def test_an_unknown_project_is_404_and_the_screen_is_the_owners(
    owner_client: Client, client: Client, project: Project
) -> None:
    assert owner_client.post("/projects/999999/environment/", {"setup": "true"}).status_code == 404
    assert owner_client.post("/projects/999999/environment/rebuild/").status_code == 404
    assert client.post(f"/projects/{project.pk}/environment/rebuild/").status_code == 302
    assert client.post(f"/projects/{project.pk}/environment/", {"setup": "x"}).status_code == 302
    project.refresh_from_db()
    assert project.environment_setup == ""
