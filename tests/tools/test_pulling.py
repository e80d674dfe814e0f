"""Pull from remote on a project's own repository: the checked-out branch fast-forwarded to what
its remote holds, and nothing the pushed commits hold interpreted by host git — a filter the
owner's configuration defines, routed to by a `.gitattributes` in the pushed tree, never runs,
nor does a hook. What cannot be fast-forwarded is refused, with nothing changed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agentos.core.tokens import create_token
from missions import project_pull
from missions.errors import MissionError
from missions.models import Project
from tests.factories import Owner
from tools import workspace

pytestmark = pytest.mark.django_db


def git(repo: Path, *args: str) -> str:
    return workspace.host_git(repo, *args).stdout.strip()


def owner_repository(base: Path) -> tuple[Path, Path]:
    """The owner's repository (a file, one commit) and its bare remote."""
    remote, repo = base / "remote.git", base / "repo"
    workspace.host_git(base, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "notes.txt").write_text("first\n")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "first")
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "--quiet", "--set-upstream", "origin", "main")
    return repo, remote


def pushed_by_an_agent(base: Path, remote: Path, files: dict[str, str]) -> str:
    """A commit on the remote's main, as a run's approved push leaves it: made elsewhere."""
    elsewhere = base / "elsewhere"
    git(base, "clone", "--quiet", str(remote), str(elsewhere))
    for name, content in files.items():
        (elsewhere / name).write_text(content)
    git(elsewhere, "add", "--all")
    git(elsewhere, "commit", "--quiet", "-m", "the agent's work")
    git(elsewhere, "push", "--quiet", "origin", "main")
    return git(remote, "rev-parse", "main")


def local_project(repo: Path) -> Project:
    return Project.objects.create(name="mine", repository=str(repo))


def test_it_fast_forwards_without_running_the_owner_s_filters_or_hooks(tmp_path: Path) -> None:
    repo, remote = owner_repository(tmp_path)
    ran = tmp_path / "ran"
    # The owner's own configuration: a filter driver (required) and a post-merge hook.
    git(repo, "config", "filter.evil.smudge", f"sh -c 'echo smudge >> {ran}; cat'")
    git(repo, "config", "filter.evil.clean", "cat")
    git(repo, "config", "filter.evil.required", "true")
    hook = repo / ".git" / "hooks" / "post-merge"
    hook.write_text(f"#!/bin/sh\necho hook >> {ran}\n")
    hook.chmod(0o755)
    commit = pushed_by_an_agent(
        tmp_path, remote, {".gitattributes": "* filter=evil\n", "payload.txt": "$Id$ data\n"}
    )

    pulled = project_pull.pull(local_project(repo))

    assert pulled is not None
    assert (pulled.branch, pulled.remote, pulled.after, pulled.moved) == (
        "main",
        "origin",
        commit,
        True,
    )
    assert git(repo, "rev-parse", "HEAD") == commit
    assert (repo / "payload.txt").read_text() == "$Id$ data\n"  # the blob's bytes
    assert not ran.exists()
    # The control: the owner's plain git does run the filter on this tree, so the pull's
    # not running it is the pull's doing.
    (repo / "payload.txt").unlink()
    checkout = ["git", "-C", str(repo), "checkout", "--", "payload.txt"]
    assert subprocess.run(checkout, check=False).returncode == 0
    assert ran.read_text() == "smudge\n"


def test_it_says_when_there_is_nothing_to_pull_and_refuses_what_is_not_a_fast_forward(
    tmp_path: Path,
) -> None:
    repo, remote = owner_repository(tmp_path)
    project = local_project(repo)
    head = git(repo, "rev-parse", "HEAD")

    pulled = project_pull.pull(project)
    assert pulled is not None
    assert (pulled.before, pulled.after, pulled.moved) == (head, head, False)

    # The owner's uncommitted change where the pushed commit writes: kept, nothing moved.
    pushed_by_an_agent(tmp_path, remote, {"notes.txt": "theirs\n"})
    (repo / "notes.txt").write_text("mine, not committed\n")
    with pytest.raises(MissionError, match="main was not fast-forwarded") as refused:
        project_pull.pull(project)
    assert (refused.value.status, refused.value.code) == (409, "not_fast_forward")
    assert (repo / "notes.txt").read_text() == "mine, not committed\n"
    assert git(repo, "rev-parse", "HEAD") == head

    # A commit of the owner's own: the branches have diverged.
    git(repo, "commit", "--quiet", "-am", "mine")
    with pytest.raises(MissionError, match="have diverged"):
        project_pull.pull(project)

    git(repo, "checkout", "--quiet", "--detach")
    with pytest.raises(MissionError, match="no branch checked out"):
        project_pull.pull(project)


def test_the_api_pulls_and_refuses_with_the_right_status(
    tmp_path: Path, owner: Owner, client: Client
) -> None:
    repo, remote = owner_repository(tmp_path)
    commit = pushed_by_an_agent(tmp_path, remote, {"notes.txt": "second\n"})
    project = local_project(repo)
    no_remote = Project.objects.create(name="alone", repository=str(repo.parent / "alone"))
    secret = create_token(owner=owner.user, name="script").secret

    def pull(project_id: int) -> tuple[int, dict[str, Any]]:
        answered = client.post(
            f"/api/v1/projects/{project_id}/pull",
            content_type="application/json",
            headers={"authorization": f"Bearer {secret}"},
        )
        return answered.status_code, answered.json()

    status, body = pull(project.pk)
    assert status == 200, body
    assert (body["after"], body["moved"]) == (commit, True)
    assert (repo / "notes.txt").read_text() == "second\n"

    status, body = pull(no_remote.pk)
    assert status == 409, body
    assert body["error"]["code"] == "not_fast_forward"
    assert "is not a git repository" in str(body["error"]["message"])
    assert pull(no_remote.pk + 100)[0] == 404
