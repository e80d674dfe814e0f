"""The agent loop keeps a mission's input in the provider's prompt cache: a short mission
through the real worker, adapter and SDK, against a server that bills the cache as the provider
does (`missions.proving.cache_wire`, the workload of `manage.py bench_cache`)."""

from __future__ import annotations

from typing import Any

import pytest

from kernel import runs
from kernel.models import Effect
from kernel.worker import Worker
from missions.engine import relief
from missions.proving import cache_bench
from tests.kernel.factories import make_mission
from tools import registry
from tools.base import Risk, Tool

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


def test_a_provider_without_a_prompt_cache_still_has_old_results_cleared() -> None:
    """Nothing cached to keep: clearing stays the first relief (`Window._keeps_cache`)."""
    tool = Tool(
        name="page",
        description="A page of text.",
        input_schema={"type": "object"},
        effect=Effect.READ,
        risk=Risk.READ,
        run=lambda call, arguments: "word " * 400,
    )
    turns: list[dict[str, Any]] = [
        {"text": f"Page {n}.", "tool_calls": [{"name": "page", "arguments": {}}]}
        for n in range(1, 10)
    ]
    turns.append({"echo_context": True})
    with registry.TOOLS.registered(tool.name, tool):
        run = runs.start_run(
            account=make_mission(),
            program="agent",
            input={
                "goal": "Read the pages.",
                "provider": "scripted",
                "model": "scripted",
                "tools": ["page"],
                "script": {"turns": turns},
                "context_window": 12000,
                "cache_aware_clearing": True,
            },
        )
        assert Worker(lease_seconds=30).run_until_idle() == ["done"]

    run.refresh_from_db()
    assert isinstance(run.output, dict)
    assert run.output["answer"].count(relief.CLEARED) >= relief.CLEAR_BATCH
