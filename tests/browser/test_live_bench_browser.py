"""`manage.py bench_live` at a small size, on the test database: it measures real deltas, from
each step's commit to a tab showing it, for every step of every run."""

from __future__ import annotations

import statistics

import pytest
from playwright.sync_api import Browser

from missions.proving import live_bench

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def registered() -> None:
    live_bench.register()


def test_it_measures_every_step_from_its_commit_to_the_tab(
    browser: Browser, registered: None
) -> None:
    said: list[str] = []

    report = live_bench.run(runs_count=2, steps=6, rounds=1, say=said.append, chromium=browser)

    (found,) = report.rounds
    assert found.unseen == 0
    assert len(found.done_ms) == 2 * 6  # every step of both runs, each in its own tab
    assert len(found.started_ms) == 2 * 6  # model calls and effects announce their start
    # A step is never shown before its commit returned (beyond the clocks' own disagreement)...
    assert min(found.done_ms + found.started_ms) > -live_bench.CLOCK_TOLERANCE_MS
    # ...and the page swaps it in as the socket brings it: a step taken from a refresh of the
    # whole timeline came at least 200 ms late (its debounce), most of them far later.
    assert statistics.median(found.done_ms) < 150
    assert len(found.arrived_ms) == 2 * 6
    assert report.summary().startswith("live_p95_ms=")
    assert "runs=2 deltas=12 unseen=0" in report.summary()
