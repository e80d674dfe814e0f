"""The demo that `make run` plays on first start: a small repository with a real bug and a
failing test, a local bare repository as its remote, and the mission "make the tests pass and
push the fix". Without an API key the offline scripted model plays it, step by step as a real
model would; with a key, the real model runs the same mission.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.db import transaction

from kernel.models import Run
from missions.launch import start_mission
from missions.models import Mission, Project
from tools import workspace

PROJECT = "demo"
GOAL = "Make the tests of the calc project pass, then commit the fix and push it to origin main."
DONE = (
    "`python3 -m unittest -v` passes in the sandbox; the fix is committed and pushed to origin"
    " main."
)

BUGGY = '''\
def average(values):
    """The arithmetic mean of a non-empty list of numbers."""
    if not values:
        raise ValueError("average of an empty list")
    return sum(values) / (len(values) - 1)
'''
FIXED_LINE = "    return sum(values) / len(values)\n"
BUGGY_LINE = "    return sum(values) / (len(values) - 1)\n"

TESTS = """\
import unittest

from calc import average


class AverageTest(unittest.TestCase):
    def test_mean_of_three(self):
        self.assertEqual(average([2, 4, 6]), 4)

    def test_single_value(self):
        self.assertEqual(average([5]), 5)

    def test_empty_is_an_error(self):
        with self.assertRaises(ValueError):
            average([])


if __name__ == "__main__":
    unittest.main()
"""

README = "# calc\n\nA tiny library. Run the tests with `python3 -m unittest -v`.\n"
# Running the tests leaves bytecode next to the sources: no commit of the agent's may carry it.
GITIGNORE = "__pycache__/\n*.py[cod]\n"

TESTS_COMMAND = "python3 -m unittest -v 2>&1"

# What the offline model plays: the steps a careful agent takes, in order, labelled as scripted
# everywhere. Where a step may fail or be refused (the commit, the owner's approval of the push),
# the turn after it says what happened instead (`on_error`, read from the tool's result).
SCRIPT: dict[str, Any] = {
    "turns": [
        {
            "text": "Let me look at the project first.",
            "tool_calls": [
                {"name": "list_files", "arguments": {}},
                {"name": "read_file", "arguments": {"path": "calc.py"}},
                {"name": "read_file", "arguments": {"path": "test_calc.py"}},
            ],
        },
        {
            "text": "Running the tests to see what fails.",
            "tool_calls": [{"name": "shell", "arguments": {"command": TESTS_COMMAND}}],
        },
        {
            "text": "average divides by len(values) - 1; the mean divides by len(values).",
            "tool_calls": [
                {
                    "name": "edit_file",
                    "arguments": {
                        "path": "calc.py",
                        "old_text": BUGGY_LINE,
                        "new_text": FIXED_LINE,
                    },
                }
            ],
        },
        {
            "text": "Running the tests again.",
            "tool_calls": [{"name": "shell", "arguments": {"command": TESTS_COMMAND}}],
        },
        {
            "text": "The tests pass. Committing the fix.",
            "tool_calls": [
                {
                    "name": "git_commit",
                    "arguments": {"message": "Fix average: divide by the number of values"},
                }
            ],
        },
        {
            "text": "Pushing the fix to origin main; this needs the owner's approval.",
            "tool_calls": [
                {"name": "git_push", "arguments": {"remote": "origin", "branch": "main"}}
            ],
            "on_error": {"text": "Not done: the commit failed, so nothing was pushed. {error}"},
        },
        {
            "text": "Done: average fixed, tests green, fix committed and pushed to origin main.",
            "on_error": {
                "text": "Not done: average is fixed and the tests pass, and the fix is committed"
                " in this run's worktree, but it was not pushed to origin main. {error}"
            },
        },
    ]
}


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
        mission = Mission.objects.create(project=project, goal=GOAL, definition_of_done=DONE)
        return start_mission(mission, trigger="demo", script=SCRIPT)
