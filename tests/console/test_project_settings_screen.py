"""The project page's long-work settings: the owner saves instructions, default criteria (one
per line) and a smoke command, or imports the instructions from AGENTS.md at the default branch
head; refusals are said on the page, next to their field, and write nothing."""

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
    (path / "AGENTS.md").write_text("Write tests first.\n")
    workspace.host_git(path, "add", "AGENTS.md")
    workspace.host_git(path, "commit", "--quiet", "-m", "first")
    return Project.objects.create(name="site", repository=str(path))


def test_the_owner_saves_the_settings_and_sees_them(owner_client: Client, project: Project) -> None:
    saved = owner_client.post(
        f"/projects/{project.pk}/settings/",
        {
            "instructions": "Answer in English.",
            "default_criteria": "$ make test\nThe README explains the change",
            "smoke_command": "sh init.sh",
        },
    )

    assert saved.status_code == 302
    assert saved["Location"].endswith(f"/projects/{project.pk}/#long-work")
    project.refresh_from_db()
    assert project.instructions == "Answer in English."
    assert [c["oracle"] for c in project.default_criteria] == [
        {"command": "make test"},
        {"evaluator": True},
    ]
    content = owner_client.get(f"/projects/{project.pk}/").content.decode()
    assert "Answer in English." in content
    assert "$ make test\nThe README explains the change" in content
    assert 'value="sh init.sh"' in content


def test_a_refused_setting_is_said_next_to_its_field(
    owner_client: Client, project: Project
) -> None:
    answer = owner_client.post(
        f"/projects/{project.pk}/settings/",
        {"instructions": "ok", "default_criteria": "$ ", "smoke_command": ""},
    )

    assert answer.status_code == 422
    assert "its command is a non-empty shell command" in answer.content.decode()
    project.refresh_from_db()
    assert project.instructions == ""


def test_the_owner_imports_the_instructions_from_agents_md(
    owner_client: Client, project: Project
) -> None:
    answer = owner_client.post(f"/projects/{project.pk}/instructions/import/", follow=True)

    content = answer.content.decode()
    project.refresh_from_db()
    assert project.instructions == "Write tests first."
    assert "data-instructions-from>Instructions imported from <code>AGENTS.md at " in content
    assert "Write tests first." in content
