"""The quick chaos matrix: crash points by workflow steps, real worker processes, SIGKILL; and
one workspace case (`missions.proving`), a shell append in a real worktree whose worker SIGKILLs
itself before its result. The other workspace cases (a fork, an engine bump, a node's runner, the
supervisor) run in full in `make chaos`, from `settings.CHAOS_CASES`; every crash point of the
kernel and the tool harness is also swept in process by tests/kernel/test_crash_sweep.py and
tests/missions/test_crash_sweep_harness.py. The takeover case is tests/chaos/test_takeover.py.

Every wait inside a workspace case has its deadline (`missions.proving.chaos.RUN_SECONDS`,
`PARK_SECONDS`): a case that cannot go on reports a violation instead of hanging."""

from __future__ import annotations

import pytest

from kernel.proving import chaos
from kernel.proving.chaos import QUICK_MATRIX, Report
from kernel.proving.harness import run_chaos
from missions.proving.chaos_runs import shell_append_case

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


def test_it_lists_the_workspace_cases_for_make_chaos() -> None:
    assert [name for name, _ in chaos.cases()] == [
        "shell_append_case",
        "fork_case",
        "engine_bump_case",
        "node_runner_case",
        "supervisor_case",
    ]
