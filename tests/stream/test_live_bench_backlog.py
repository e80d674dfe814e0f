"""The live path's benchmark numbers what the other benchmarks left to the stream before its
clock starts: they write steps with no server, so no stream tap numbers them as they land."""

from __future__ import annotations

import pytest
from django.db import connection

from kernel import runs, stream
from kernel.worker import Worker
from missions.proving import live_bench

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_numbers_the_stream_s_backlog_before_it_measures() -> None:
    runs.start_run(
        account=live_bench.make_account(), program="chaos.noop", input={"steps": 5, "writes": True}
    )
    assert Worker(lease_seconds=30).work_one() == "done"
    assert unannounced() == 5

    numbered = live_bench.catch_up()

    assert numbered >= 10  # each write's start and end
    assert unannounced() == 0
    assert live_bench.catch_up() == 0
    assert stream.sequence() == 0


def unannounced() -> int:
    """Steps whose events the stream has not derived yet (a column the kernel's model omits)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM kernel_step WHERE announced < 2")
        return int(cursor.fetchone()[0])
