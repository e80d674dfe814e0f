"""A project's long-work settings over the API: instructions, default criteria and smoke command
set at creation or changed with PATCH, each checked precisely (422 naming every wrong field,
nothing written); instructions imported from AGENTS.md at the default branch head by the owner's
act, never from a run. A mission that gives no criteria is held to the project's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentos.core.models import AuditEvent
from missions.launch import create_mission
from missions.models import Project
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)
CHECK = {"id": "tests", "description": "The tests pass", "oracle": {"command": "make test"}}


def commit(repository: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repository / name).write_text(text)
    workspace.host_git(repository, "add", "--all")
    workspace.host_git(repository, "commit", "--quiet", "-m", "files")
    return workspace.host_git(repository, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    path = tmp_path / "site"
    subprocess.run(["git", "init", "-q", "--initial-branch=main", str(path)], check=True)
    commit(path, {"README.md": "site\n"})
    return path


@pytest.fixture
def project(repository: Path) -> Project:
    return Project.objects.create(name="site", repository=str(repository))


def test_it_creates_a_project_with_its_settings(api: Api, repository: Path) -> None:
    answer = api.post(
        "/projects",
        {
            "name": "made",
            "repository": str(repository),
            "instructions": "  Keep functions short.\r\n",
            "default_criteria": [CHECK],
            "smoke_command": "sh init.sh",
        },
    )

    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["instructions"] == "Keep functions short."
    assert body["instructions_from"] == ""
    assert body["default_criteria"] == [{**CHECK, "passes": False}]
    assert body["smoke_command"] == "sh init.sh"


def test_bad_settings_are_refused_with_every_field_named_and_nothing_made(api: Api) -> None:
    answer = api.post(
        "/projects",
        {
            "name": "nothing",
            "instructions": "x" * 20_001,
            "default_criteria": [{"id": "a", "description": "b", "oracle": {"shell": "c"}}],
            "smoke_command": "true",
        },
    )

    assert answer.status_code == 422, answer.content
    error = error_of(answer)
    fields = error["details"]["fields"]  # type: ignore[index]
    assert set(fields) == {"instructions", "default_criteria", "smoke_command"}
    assert "At most 20,000 characters." in fields["instructions"]
    assert "its oracle is exactly one of" in fields["default_criteria"][0]
    assert "this project has no repository" in fields["smoke_command"][0]
    assert not Project.objects.filter(name="nothing").exists()


def test_patch_changes_only_the_fields_given_and_logs_the_change(
    api: Api, project: Project
) -> None:
    api.patch(f"/projects/{project.pk}", {"instructions": "A", "smoke_command": "make smoke"})

    answer = api.patch(f"/projects/{project.pk}", {"default_criteria": [CHECK]})

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["instructions"], body["smoke_command"]) == ("A", "make smoke")
    assert body["default_criteria"][0]["id"] == "tests"
    logged = AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).order_by("pk")
    assert [e.detail["fields"] for e in logged] == [
        ["instructions", "smoke_command"],
        ["default_criteria"],
    ]
    assert all(e.detail["by"].startswith("token:") for e in logged)
    # A criterion that is not one, or an unknown field: 422, nothing changed.
    refused = api.patch(f"/projects/{project.pk}", {"default_criteria": [{"id": "x"}]})
    assert refused.status_code == 422
    unknown = api.patch(f"/projects/{project.pk}", {"name": "renamed"})
    assert unknown.status_code == 422
    project.refresh_from_db()
    assert project.default_criteria[0]["id"] == "tests"
    assert project.name == "site"


def test_missions_without_criteria_are_held_to_the_projects(
    api: Api, project: Project, seeded_catalog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    api.patch(f"/projects/{project.pk}", {"default_criteria": [CHECK]})
    project.refresh_from_db()
    script = {"turns": [{"text": "Done."}]}

    _mission, defaulted = create_mission(
        project=project, goal="Fix it.", trigger="owner", script=script
    )
    own = {"id": "own", "description": "Its own", "oracle": {"command": "true"}}
    _mission, given = create_mission(
        project=project, goal="Fix it.", trigger="owner", script=script, criteria=[own]
    )

    assert [c["id"] for c in defaulted.input["criteria"]] == ["tests"]
    assert defaulted.input["stop_hook"] == "definition_of_done"
    assert [c["id"] for c in given.input["criteria"]] == ["own"]
    assert defaulted.input["resume"] is True


def test_it_imports_agents_md_at_the_default_branch_head(
    api: Api, project: Project, repository: Path
) -> None:
    head = commit(repository, {"AGENTS.md": "Run the tests.\n", "CLAUDE.md": "Not this one.\n"})

    answer = api.post(f"/projects/{project.pk}/instructions/import")

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["instructions"] == "Run the tests."
    assert body["instructions_from"] == f"AGENTS.md at {head}"
    (logged,) = AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED)
    assert logged.detail["change"] == f"imported from AGENTS.md at {head}"
    # The owner's own words afterwards: no longer the file's.
    typed = api.patch(f"/projects/{project.pk}", {"instructions": "Mine."}).json()
    assert (typed["instructions"], typed["instructions_from"]) == ("Mine.", "")


def test_an_instruction_file_that_is_a_link_or_missing_is_refused(
    api: Api, project: Project, repository: Path
) -> None:
    missing = api.post(f"/projects/{project.pk}/instructions/import")
    assert missing.status_code == 422
    assert "has no AGENTS.md or CLAUDE.md" in str(error_of(missing)["message"])

    (repository / "AGENTS.md").symlink_to("/etc/passwd")
    commit(repository, {})
    linked = api.post(f"/projects/{project.pk}/instructions/import")

    assert linked.status_code == 422
    assert "AGENTS.md at" in str(error_of(linked)["message"])
    assert "is not a regular file" in str(error_of(linked)["message"])
    project.refresh_from_db()
    assert project.instructions == ""
