"""The demo's mission as data: its project, its repository's files (a real bug, a failing test)
and the script the offline model plays on it. Apart from `missions.demo` (which makes the
repositories and starts the mission) so that the offline missions (`missions.offline`) can offer
it again on the demo project without importing the launcher.
"""

from __future__ import annotations

from typing import Any

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
