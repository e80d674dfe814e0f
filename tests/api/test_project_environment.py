"""A project's environment over the API: setting its setup commands pins the project's default
branch head and builds it, Rebuild pins the head as it is now; the answer names the version of
(commands, commit) and the build's outcome. Bad input is answered precisely, and writes nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentos.core.models import AuditEvent
from missions.models import Project
from tests.api.conftest import Api
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)

SETUP = "mkdir -p /env && cat notes.txt > /env/notes"


def commit(repository: Path, text: str) -> str:
    (repository / "notes.txt").write_text(text)
    workspace.host_git(repository, "add", "notes.txt")
    workspace.host_git(repository, "commit", "--quiet", "-m", text)
    return workspace.host_git(repository, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    path = tmp_path / "site"
    subprocess.run(["git", "init", "-q", "--initial-branch=main", str(path)], check=True)
    return path


@pytest.fixture
def project(repository: Path) -> Project:
    commit(repository, "first\n")
    return Project.objects.create(name="site", repository=str(repository))


def test_it_sets_the_commands_pins_the_head_and_builds(
    api: Api, project: Project, repository: Path
) -> None:
    head = workspace.host_git(repository, "rev-parse", "HEAD").stdout.strip()

    answer = api.put(f"/projects/{project.pk}/environment", {"setup": SETUP})

    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert body["setup"] == SETUP
    assert body["commit"] == head
    assert len(body["version"]) == 16
    shown = api.get(f"/projects/{project.pk}/environment").json()
    assert shown["status"] == "built", shown["log"]
    assert shown["version"] == body["version"]
    (logged,) = AuditEvent.objects.filter(kind=AuditEvent.Kind.ENVIRONMENT_CHANGED)
    assert logged.detail["change"] == "saved"
    assert logged.detail["commit"] == head
    assert logged.detail["by"].startswith("token:")


def test_rebuild_pins_the_head_as_it_is_now_a_new_version(
    api: Api, project: Project, repository: Path
) -> None:
    before = api.put(f"/projects/{project.pk}/environment", {"setup": SETUP}).json()
    moved = commit(repository, "second\n")

    answer = api.post(f"/projects/{project.pk}/environment/rebuild")

    assert answer.status_code == 202, answer.content
    after = answer.json()
    assert after["commit"] == moved
    assert after["version"] != before["version"]
    assert api.get(f"/projects/{project.pk}/environment").json()["status"] == "built"
    changes = AuditEvent.objects.filter(kind=AuditEvent.Kind.ENVIRONMENT_CHANGED)
    assert [e.detail["change"] for e in changes.order_by("pk")] == ["saved", "rebuilt"]


def test_a_failing_build_is_shown_with_its_output(api: Api, project: Project) -> None:
    api.put(f"/projects/{project.pk}/environment", {"setup": "echo no compiler >&2; exit 4"})

    shown = api.get(f"/projects/{project.pk}/environment").json()

    assert shown["status"] == "failed"
    assert "no compiler" in shown["log"]
    assert "exit code 4" in shown["log"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/projects/999999/environment"),
        ("PUT", "/projects/999999/environment"),
        ("POST", "/projects/999999/environment/rebuild"),
    ],
)
def test_an_unknown_project_is_404(api: Api, method: str, path: str) -> None:
    answer = api.send(method, path, {"setup": SETUP} if method == "PUT" else None)

    assert answer.status_code == 404, answer.content
    assert answer.json()["error"]["message"] == "No project 999999."


def test_rebuild_without_setup_commands_is_422(api: Api, project: Project) -> None:
    answer = api.post(f"/projects/{project.pk}/environment/rebuild")

    assert answer.status_code == 422, answer.content
    assert answer.json()["error"]["code"] == "no_environment_setup"
    project.refresh_from_db()
    assert project.environment_status == "none"


def test_a_repository_without_a_commit_is_422_and_nothing_is_written(
    api: Api, repository: Path
) -> None:
    empty = Project.objects.create(name="empty", repository=str(repository))

    answer = api.put(f"/projects/{empty.pk}/environment", {"setup": SETUP})

    assert answer.status_code == 422, answer.content
    assert "no commit" in answer.json()["error"]["message"]
    empty.refresh_from_db()
    assert (empty.environment_setup, empty.environment_commit) == ("", "")


@pytest.mark.parametrize(
    "body",
    [{}, {"setup": 3}, {"setup": SETUP, "commit": "0" * 40}, {"setup": "x" * 20_001}],
)
def test_bad_input_is_422_and_nothing_is_written(api: Api, project: Project, body: object) -> None:
    answer = api.put(f"/projects/{project.pk}/environment", body)

    assert answer.status_code == 422, answer.content
    project.refresh_from_db()
    assert project.environment_setup == ""


def test_empty_commands_remove_the_environment(api: Api, project: Project) -> None:
    api.put(f"/projects/{project.pk}/environment", {"setup": SETUP})

    answer = api.put(f"/projects/{project.pk}/environment", {"setup": "  "})

    assert answer.status_code == 202
    assert answer.json() | {"changed_at": None} == {
        "setup": "",
        "commit": "",
        "version": "",
        "status": "none",
        "log": "",
        "changed_at": None,
    }
