"""The demo that `make run` plays on first start: a small repository with a real bug and a
failing test, a local bare repository as its remote, and the mission "make the tests pass and
push the fix". Without an API key the offline scripted model plays it, step by step as a real
model would; with a key, the real model runs the same mission.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from django.db import transaction

from kernel.models import Run
from missions import offline

# Re-exported: the mission as data lives in `missions.demo_script`; serve and tests read demo.X.
from missions.demo_script import BUGGY as BUGGY
from missions.demo_script import BUGGY_LINE as BUGGY_LINE
from missions.demo_script import DONE as DONE
from missions.demo_script import FIXED_LINE as FIXED_LINE
from missions.demo_script import GITIGNORE as GITIGNORE
from missions.demo_script import GOAL as GOAL
from missions.demo_script import PROJECT as PROJECT
from missions.demo_script import README as README
from missions.demo_script import SCRIPT as SCRIPT
from missions.demo_script import TESTS as TESTS
from missions.demo_script import TESTS_COMMAND as TESTS_COMMAND
from missions.launch import start_mission
from missions.models import Mission, Project
from missions.routing import route_for
from tools import workspace


def create_repositories(base: Path) -> Path:
    """The demo's working repository (returned) and its bare remote, from scratch."""
    repo, remote = base / "calc", base / "calc-remote.git"
    for path in (repo, remote):
        if path.exists():
            shutil.rmtree(path)
    repo.mkdir(parents=True)
    (repo / "calc.py").write_text(BUGGY)
    (repo / "test_calc.py").write_text(TESTS)
    (repo / "README.md").write_text(README)
    (repo / ".gitignore").write_text(GITIGNORE)
    workspace.host_git(base, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    # The remote keeps a log of its branch moves: who pushed what, and how many times.
    workspace.host_git(remote, "config", "core.logAllRefUpdates", "always")
    workspace.host_git(repo, "init", "--quiet", "--initial-branch=main")
    workspace.host_git(repo, "add", "--all")
    workspace.host_git(repo, "commit", "--quiet", "-m", "calc: average, with tests")
    workspace.host_git(repo, "remote", "add", "origin", str(remote))
    workspace.host_git(repo, "push", "--quiet", "origin", "main")
    return repo


def ensure_demo(base: Path | None = None) -> Run | None:
    """Create the demo project and start its mission, once (None if it exists already)."""
    if Project.objects.filter(name=PROJECT).exists():
        return None
    repo = create_repositories(base or workspace.root() / "demo")
    with transaction.atomic():
        project, created = Project.objects.get_or_create(
            name=PROJECT,
            defaults={
                "description": "A small repository with a real bug and a failing test.",
                "repository": str(repo),
            },
        )
        if not created:
            return None
        # No model can be called: the offline model plays it, as the offline mission it is, so
        # that a relaunch starts it offline again (its run's contract says `offline`).
        played = route_for(Mission(routes={}), "executor").provider == "scripted"
        mission = Mission.objects.create(
            project=project,
            goal=GOAL,
            definition_of_done=DONE,
            routes=offline.ROUTES if played else {},
        )
        return start_mission(mission, trigger="demo", offline=offline.DEMO if played else None)
