"""The quick chaos matrix: crash points by workflow steps, real worker processes, SIGKILL."""

from __future__ import annotations

import pytest

from kernel.chaos import QUICK_MATRIX
from kernel.chaos_harness import run_chaos

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


def test_it_loses_and_repeats_nothing_when_workers_die_at_every_crash_point() -> None:
    report = run_chaos(QUICK_MATRIX, workers=2, seed=1, timeout=240)

    print(report.line())
    assert report.violations == []
    assert report.targets_fired == len(QUICK_MATRIX)
    assert report.kills == len(QUICK_MATRIX)  # one run per worker: every kill is a target
    assert report.steps > 0
