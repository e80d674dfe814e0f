"""The meter of one execution, on its own: counters, the watermark, the caps it stops at."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from kernel.budgets import Ledger
from kernel.debits import Debit
from kernel.exceptions import Stop
from kernel.journal import Record
from kernel.metering import Meter
from kernel.models import Run, RunStatus, StepKind


def meter(**fields: object) -> Meter:
    return Meter(Run(pk=7, ancestors=[], **fields))


def record(seq: int, kind: str) -> Record:
    return Record(seq, kind, "read", "x", "", None, True, "executed")


def test_it_counts_turns_and_tool_calls_only() -> None:
    m = meter()
    for kind in (StepKind.MODEL_CALL, StepKind.TOOL_CALL, StepKind.TOOL_CALL, StepKind.JOIN):
        m.count(kind)

    assert (m.unbilled_turns, m.unbilled_tool_calls) == (1, 2)


def test_it_counts_a_replayed_step_only_past_the_billing_watermark() -> None:
    m = meter(billed_through=3)

    m.count_replayed(record(3, StepKind.TOOL_CALL))
    m.count_replayed(record(4, StepKind.TOOL_CALL))

    assert m.unbilled_tool_calls == 1
    m.billed(4)
    assert (m.unbilled_tool_calls, m.billed_through) == (0, 4)


def test_it_stops_the_run_at_its_own_counter_cap_before_the_next_step() -> None:
    m = meter(max_tool_calls=2, tool_calls=1)
    m.check_counters()
    m.check()  # 1 spent, none unbilled: goes on

    m.count(StepKind.TOOL_CALL)
    m.check_counters()

    assert m.over_budget == "run 7 reached max_tool_calls"
    with pytest.raises(Stop) as stop:
        m.check()
    assert stop.value.status == RunStatus.BUDGET_EXHAUSTED


def test_it_stops_the_run_out_of_time() -> None:
    m = meter(max_seconds=60, started_at=timezone.now() - timedelta(seconds=61))

    with pytest.raises(Stop, match="max_seconds 60 reached"):
        m.check()


def test_it_notes_its_own_cap_crossed_by_a_debit() -> None:
    m = meter()

    m.check_debit(Debit({7: Ledger(tokens=10, caps={"max_tokens": 10})}, None, None))

    assert m.over_budget == "run 7 reached max_tokens"
