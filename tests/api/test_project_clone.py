"""A project from a clone URL: the remote is cloned on this machine with the credential it asks
for, which is kept encrypted and used again for updates; a URL that is not a remote's, or a
clone that fails, is refused with the field's message and leaves nothing behind."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from agentos.core import vault
from missions.models import Project
from tests.api.conftest import Api
from tests.tools.git_http import GitServer, bare_remote, git_http_server
from tools import workspace
from tools.models import CredentialKind, RemoteCredential

pytestmark = pytest.mark.django_db

TOKEN = "glpat-clone-4d1e9b7c2a"  # the test remote's only credential


def commit_to(remote: Path, message: str, scratch: Path) -> str:
    """A commit pushed to the bare `remote` from a scratch clone: its hash."""
    env = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(scratch)}
    work = scratch / "work"
    if not work.exists():
        subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True, env=env)
    (work / "notes.txt").write_text(message + "\n")
    git = ["git", "-C", str(work), "-c", "user.name=o", "-c", "user.email=o@x.invalid"]
    subprocess.run([*git, "add", "notes.txt"], check=True, env=env)
    subprocess.run([*git, "commit", "-qm", message], check=True, env=env)
    subprocess.run([*git, "push", "-q", "origin", "HEAD:main"], check=True, env=env)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, env=env, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[GitServer, str]]:
    root = tmp_path / "served"
    root.mkdir()
    first = commit_to(bare_remote(root / "site.git"), "first", tmp_path)
    with git_http_server(root, user="x-access-token", token=TOKEN) as server:
        yield server, first


def clones() -> set[str]:
    folder = workspace.root() / "projects"
    return {path.name for path in folder.iterdir()} if folder.is_dir() else set()


def head_of(repository: str) -> str:
    return workspace.host_git(Path(repository), "rev-parse", "main").stdout.strip()


def test_it_clones_with_the_token_keeps_it_encrypted_and_updates_with_it(
    api: Api, remote: tuple[GitServer, str], tmp_path: Path
) -> None:
    server, first = remote
    url = f"{server.url}site.git"

    created = api.post(
        "/projects",
        {"name": "site", "clone_url": url, "credential": {"kind": "token", "secret": TOKEN}},
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["clone_url"] == url
    project = Project.objects.get()
    assert body["repository"] == project.repository
    assert Path(project.repository).parent == workspace.root() / "projects"
    assert head_of(project.repository) == first
    assert workspace.remote_url(Path(project.repository), "origin") == url  # pushes go there
    stored = RemoteCredential.objects.get(project=project, remote="origin")
    assert stored.kind == CredentialKind.TOKEN
    assert TOKEN.encode() not in bytes(stored.ciphertext)
    assert vault.decrypt(bytes(stored.ciphertext)) == TOKEN
    assert TOKEN not in created.content.decode()

    second = commit_to(server.root / "site.git", "second", tmp_path)
    refreshed = api.post(f"/projects/{project.pk}/refresh")

    assert refreshed.status_code == 200, refreshed.content
    assert head_of(project.repository) == second


def test_a_clone_the_remote_refuses_is_a_field_error_and_leaves_nothing(
    api: Api, remote: tuple[GitServer, str]
) -> None:
    server, _ = remote
    before = clones()

    refused = api.post(
        "/projects",
        {
            "name": "site",
            "clone_url": f"{server.url}site.git",
            "credential": {"kind": "token", "secret": "wrong-token-1234"},
        },
    )

    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "invalid_input"
    (message,) = error["details"]["fields"]["clone_url"]
    assert message == "Cannot clone it: the remote asks for a credential, or refused the one given"
    assert "wrong-token-1234" not in refused.content.decode()
    assert server.refused
    assert not Project.objects.exists()
    assert not RemoteCredential.objects.exists()
    assert clones() == before


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc",
        "ext::sh -c touch% /tmp/pwned",
        "/srv/git/site.git",
        "-uhelp@host:repo",
        "ssh://-oProxyCommand=touch%20x/repo",
        "git@host:-repo",
        "https://host/repo with space",
        "https://deploy:s3cret-token@git.example.com/site.git",
    ],
)
def test_a_url_that_is_not_a_remote_s_is_refused_before_any_git(api: Api, url: str) -> None:
    before = clones()

    refused = api.post("/projects", {"name": "site", "clone_url": url})

    assert refused.status_code == 422, refused.content
    assert "clone_url" in refused.json()["error"]["details"]["fields"]
    assert not Project.objects.exists()
    assert clones() == before


def test_a_path_and_a_url_together_or_a_credential_alone_are_refused(api: Api) -> None:
    both = api.post(
        "/projects", {"name": "a", "repository": "/srv/a", "clone_url": "https://h/a.git"}
    )
    alone = api.post(
        "/projects", {"name": "a", "credential": {"kind": "ssh_key", "secret": "-----BEGIN"}}
    )

    assert both.status_code == 422
    assert both.json()["error"]["details"]["fields"]["clone_url"] == [
        "Give a local path or a clone URL, not both."
    ]
    assert alone.status_code == 422
    assert "credential" in alone.json()["error"]["details"]["fields"]


def test_a_project_on_this_machine_has_nothing_to_update_from(api: Api, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path / "local")], check=True)
    project = Project.objects.create(name="local", repository=str(tmp_path / "local"))

    refused = api.post(f"/projects/{project.pk}/refresh")

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "not_cloned"


def test_the_console_clones_from_a_url_and_offers_an_update(
    owner_client: Client, remote: tuple[GitServer, str]
) -> None:
    server, first = remote
    url = f"{server.url}site.git"

    created = owner_client.post(
        "/projects/",
        {
            "name": "site",
            "clone_url": url,
            "credential_kind": "token",
            "credential_secret": TOKEN,
        },
    )

    project = Project.objects.get()
    assert created.status_code == 302, created.content.decode()
    assert head_of(project.repository) == first
    page = owner_client.get(f"/projects/{project.pk}/").content.decode()
    assert f"<code>{url}</code>" in page
    assert f'action="/projects/{project.pk}/refresh/"' in page
    assert TOKEN not in page
    updated = owner_client.post(f"/projects/{project.pk}/refresh/", follow=True)
    assert "Updated from" in updated.content.decode()


def test_the_console_shows_why_a_clone_failed_on_the_form(
    owner_client: Client, remote: tuple[GitServer, str]
) -> None:
    server, _ = remote

    refused = owner_client.post(
        "/projects/", {"name": "site", "clone_url": f"{server.url}site.git"}
    )

    assert refused.status_code == 422
    assert "Cannot clone it:" in refused.content.decode()
    assert not Project.objects.exists()
