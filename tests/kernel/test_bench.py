"""The kernel benchmark's pairs: what it counts is what the journal does (one commit a step)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from kernel.models import Run
from kernel.proving import bench, floor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("writes", [False, True], ids=["free reads", "idempotent writes"])
def test_a_step_safe_to_run_again_costs_one_commit_where_the_floor_costs_two(
    writes: bool,
) -> None:
    with floor.scratch_tables():
        pairs = bench.measure_pairs(
            bench.make_account(), blocks=3, steps=10, writes=writes, no_disk=False
        )

    # Each pair: a block of the kernel's steps, then the floor's; nothing else writes here.
    assert pairs.kernel_commits == [1.0, 1.0, 1.0]
    assert pairs.floor_commits == [2.0, 2.0, 2.0]
    assert len(pairs.kernel_us) == len(pairs.floor_us) == 3
    assert all(us > 0 for us in pairs.kernel_us + pairs.floor_us)


def test_without_the_disk_both_sides_commit_as_often() -> None:
    with floor.scratch_tables():
        pairs = bench.measure_pairs(
            bench.make_account(), blocks=2, steps=10, writes=True, no_disk=True
        )

    assert pairs.kernel_commits == [1.0, 1.0]
    assert pairs.floor_commits == [2.0, 2.0]


@pytest.mark.parametrize("name", ["bench_kernel", "bench_engine", "bench_cache", "bench_live"])
def test_a_benchmark_refuses_a_database_not_its_own(name: str) -> None:
    with pytest.raises(CommandError, match="not a dedicated benchmark one"):
        call_command(name, stdout=io.StringIO())
    assert not Run.objects.exists()
