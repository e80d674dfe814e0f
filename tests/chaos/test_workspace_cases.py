"""The workspace chaos cases (`missions.chaos`), each on its own: coding runs in real worktrees,
real worker processes that SIGKILL themselves at crash points. `make chaos` runs the same cases
(`settings.CHAOS_CASES`); the takeover case is tests/chaos/test_takeover.py.

Every wait inside a case has its deadline (`missions.chaos.RUN_SECONDS`, `PARK_SECONDS`); a
case that cannot go on reports a violation instead of hanging."""

from __future__ import annotations

import pytest

from kernel import chaos
from kernel.chaos import Report
from missions.chaos import engine_bump_case, fork_case, shell_append_case

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("seeded_catalog"),
]


def passed(report: Report, *, kills: int) -> None:
    print(report.line())
    assert report.violations == []
    assert report.kills == kills  # every planned crash happened, by SIGKILL
    assert report.steps > 0


def test_it_applies_a_shell_append_killed_before_its_result_once() -> None:
    passed(shell_append_case(), kills=1)


def test_it_forks_into_a_worktree_of_its_own_equal_to_the_fork_steps_checkpoint() -> None:
    passed(fork_case(), kills=2)


def test_it_parks_or_resumes_a_run_across_an_engine_bump_never_leaving_it_unclaimed() -> None:
    passed(engine_bump_case(), kills=1)


def test_it_lists_the_workspace_cases_for_make_chaos() -> None:
    assert [name for name, _ in chaos.cases()] == [
        "shell_append_case",
        "fork_case",
        "engine_bump_case",
    ]
