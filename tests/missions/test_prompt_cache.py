"""The agent loop keeps a mission's input in the provider's prompt cache: a short mission
through the real worker, adapter and SDK, against a server that bills the cache as the provider
does (`missions.proving.cache_wire`, the workload of `manage.py bench_cache`)."""

from __future__ import annotations

import pytest

from missions.proving import cache_bench

pytestmark = pytest.mark.django_db(transaction=True)

# 14 turns of 3,000-byte reads in a 30,000-token window: past the clearing threshold (40 %),
# short of compaction for Anthropic.
TURNS = 14
WINDOW = 30_000


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_it_reads_90_percent_of_a_short_missions_input_from_the_cache(provider: str) -> None:
    measured = cache_bench.run_one(provider, window=WINDOW, turns=TURNS)

    assert measured.after_turn_2.share >= cache_bench.TARGET, measured.turns
    assert [n for n, _ in measured.turns] == list(range(1, TURNS + 1))
    # Every turn after the first reads at least the frozen prefix.
    assert all(spent.read > 0 for n, spent in measured.turns if n > 1)
    assert not measured.cleared  # kept until compaction: the cached thread stays as it was


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_run_started_before_cache_aware_clearing_clears_and_misses_the_cache(
    provider: str,
) -> None:
    """What the fix is for: clearing old results every few turns rewrites the cached thread
    from the first one cleared (runs started before keep it, their replays must match)."""
    measured = cache_bench.run_one(provider, window=WINDOW, turns=TURNS, cache_aware=False)

    assert measured.cleared
    assert measured.after_turn_2.share < cache_bench.TARGET
