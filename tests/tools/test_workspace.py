"""Where runs work: the product makes its own directories and changes no other; a run's repository
is made once, from data, with no remote; a half-made or stale one is made again."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cluster.sandbox import identity
from kernel import runs
from missions.models import Mission
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_it_never_changes_the_mode_of_a_directory_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    private = shared / "home"
    private.mkdir()
    private.chmod(0o750)  # like a home directory
    monkeypatch.setenv("AGENTOS_WORKSPACES_DIR", str(private / "agentos" / "spaces"))

    made = workspace.root()

    assert made.is_dir()
    assert mode(shared) == 0o1777
    assert mode(private) == 0o750
    expected = 0o711 if os.geteuid() == 0 else 0o700
    assert mode(private / "agentos") == expected
    assert mode(made) == expected


def start(mission: Mission, repo: Path) -> int:
    run = runs.start_run(account=mission, program="agent", input={"repository": str(repo)})
    return run.pk


def test_a_run_s_repository_has_no_remote_and_belongs_to_the_run(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    run_id = start(mission, repo)
    path = workspace.ensure_worktree(run_id, str(repo))

    assert (path / "calc.py").read_text().startswith("def average")
    config = (path / ".git" / "config").read_text()
    assert "[remote" not in config
    assert "url" not in config
    assert path.stat().st_uid == identity(run_id)[0]
    assert mode(path) & 0o077 == 0  # other runs cannot look in
    assert workspace.ensure_worktree(run_id, str(repo)) == path  # made once


def test_a_half_made_or_stale_repository_is_made_again(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    run_id = start(mission, repo)
    path = workspace.ensure_worktree(run_id, str(repo))
    (path / "left-over.txt").write_text("from a run that had this id before")
    marker = path.with_name(path.name + workspace.READY)

    marker.unlink()  # as if killed before the marker was written
    again = workspace.ensure_worktree(run_id, str(repo))
    assert not (again / "left-over.txt").exists()

    (again / "left-over.txt").write_text("stale")
    marker.write_text('{"run": "another run"}')  # a database reset reused the id
    assert not (workspace.ensure_worktree(run_id, str(repo)) / "left-over.txt").exists()
