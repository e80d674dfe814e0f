"""A worker SIGKILLed mid-step gives its run up at once: with the default 30 s lease, another
worker resumes it within seconds, not when the lease runs out."""

from __future__ import annotations

import pytest

from kernel import holders
from kernel.proving.harness import TAKEOVER_LIMIT_SECONDS, run_takeover

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(holders.this_process() is None, reason="needs Linux /proc"),
]


def test_it_resumes_a_killed_workers_run_on_another_worker_within_seconds() -> None:
    takeover = run_takeover()

    assert takeover.seconds < TAKEOVER_LIMIT_SECONDS
    assert takeover.finished_by == takeover.survivor  # the step ran again, on the other worker
