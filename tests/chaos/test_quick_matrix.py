"""The quick chaos matrix: crash points by workflow steps, real worker processes, SIGKILL; and
the workspace cases (`missions.chaos`, the ones `make chaos` runs from `settings.CHAOS_CASES`),
each on its own: coding runs in real worktrees whose workers SIGKILL themselves at crash points
in their quick forms (`make chaos` runs each in full). The takeover case is
tests/chaos/test_takeover.py.

Every wait inside a workspace case has its deadline (`missions.chaos.RUN_SECONDS`,
`PARK_SECONDS`): a case that cannot go on reports a violation instead of hanging."""

from __future__ import annotations

import pytest

from kernel.proving import chaos
from kernel.proving.chaos import QUICK_MATRIX, Report
from kernel.proving.harness import run_chaos
from missions.chaos import (
    engine_bump_case,
    fork_case,
    node_runner_case,
    shell_append_case,
    supervisor_case,
)

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.django_db(transaction=True),
    # Measured up to 62 s a test; above the harness's own bound (run_chaos: 300 s by default), so
    # that a stuck matrix fails with the harness's report rather than a stack dump.
    pytest.mark.timeout(360),
]


def test_it_loses_and_repeats_nothing_when_workers_die_at_every_crash_point() -> None:
    report = run_chaos(QUICK_MATRIX, workers=2, seed=1, timeout=240)

    print(report.line())
    assert report.violations == []
    assert report.targets_fired == len(QUICK_MATRIX)
    assert report.kills == len(QUICK_MATRIX)  # one run per worker: every kill is a target
    assert report.steps > 0


def passed(report: Report, *, kills: int) -> None:
    print(report.line())
    assert report.violations == []
    assert report.kills == kills  # every planned crash happened, by SIGKILL
    assert report.steps > 0


@pytest.mark.usefixtures("seeded_catalog")
def test_it_applies_a_shell_append_killed_before_its_result_once() -> None:
    passed(shell_append_case(), kills=1)


@pytest.mark.usefixtures("seeded_catalog")
def test_it_forks_into_a_worktree_of_its_own_equal_to_the_fork_steps_checkpoint() -> None:
    passed(fork_case(), kills=2)


@pytest.mark.usefixtures("seeded_catalog")
def test_it_parks_or_resumes_a_run_across_an_engine_bump_never_leaving_it_unclaimed() -> None:
    passed(engine_bump_case(), kills=1)


@pytest.mark.usefixtures("seeded_catalog")
def test_a_supervisor_killed_at_its_spawns_joins_merges_and_verdicts_ends_as_its_twin() -> None:
    # Eight kills over the supervisor's spawns, joins, a merge and the verdicts, one inside
    # a reader and one inside a writer; the full matrix (every step) runs in `make chaos`.
    report = supervisor_case(quick=True)

    print(report.line())
    assert report.violations == []
    assert report.targets_fired == 10
    # Two runs of one worker may reach their crash points at once (the supervisor its join, a
    # reader it has just spawned its model call): one death for both.
    assert 8 <= report.kills <= 10


def test_it_lists_the_workspace_cases_for_make_chaos() -> None:
    assert [name for name, _ in chaos.cases()] == [
        "shell_append_case",
        "fork_case",
        "engine_bump_case",
        "node_runner_case",
        "supervisor_case",
    ]


@pytest.mark.usefixtures("seeded_catalog")
def test_a_runner_killed_mid_step_on_its_node_leaves_each_write_applied_once() -> None:
    passed(node_runner_case(quick=True), kills=2)
