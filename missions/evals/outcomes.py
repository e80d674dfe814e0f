"""What each evaluation task came to, kept (`EvalOutcome`) for the Costs screen's completion and
cost per completed task per profile over time (`missions.profile_costs`), and the table `make
eval` ends with: per profile, its suite's completion and cost per completed task.

Cost per completed task is everything the suite's missions spent, failed ones included, divided
by the tasks completed (the oracle's verdict), as `runner.summary` counts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from missions.models import EvalOutcome, Profile

if TYPE_CHECKING:  # the runner imports this module
    from missions.evals.runner import Result


def record(result: Result, *, suite: str, mode: str, profile: Profile | None) -> EvalOutcome:
    """One row per task and attempt: a rerun adds rows, the history is the point."""
    return EvalOutcome.objects.create(
        profile=profile,
        profile_name=profile.name if profile else "",
        suite=suite[:100],
        task=result.task.name,
        mode=mode,
        mission_id=result.mission_id,
        status=result.status[:30],
        passed=result.passed,
        detail=result.detail[:4000],
        tokens=result.tokens,
        usd_micros=result.usd_micros,
        seconds=result.seconds,
        model=result.model[:100],
    )


@dataclass(frozen=True)
class Line:
    """One profile's suite, as run (`results`), or why it was not (`skipped`)."""

    profile: str
    suite: str
    results: tuple[Result, ...] = ()
    skipped: str = ""


COLUMNS = "{:<14} {:<14} {:>6} {:>10} {:>7} {:>16} {:>14}"
HEADER = COLUMNS.format(
    "profile", "suite", "tasks", "completed", "rate", "$ per completed", "tokens per c."
)


def table(lines: Iterable[Line]) -> list[str]:
    """The final table, then one machine-readable line per profile run."""
    shown, machine = [HEADER], []
    for line in lines:
        if line.skipped:
            shown.append(f"{line.profile:<14} {line.skipped}")
            continue
        tasks = len(line.results)
        completed = sum(result.passed for result in line.results)
        usd = sum(result.usd_micros for result in line.results) / 1e6
        tokens = sum(result.tokens for result in line.results)
        rate = completed / tasks if tasks else 0.0
        per_cost = f"{usd / completed:.6f}" if completed else "none"
        per_tokens = f"{tokens / completed:.0f}" if completed else "none"
        shown.append(
            COLUMNS.format(
                line.profile[:14],
                line.suite[:14],
                tasks,
                f"{completed}/{tasks}",
                f"{rate:.0%}",
                per_cost,
                per_tokens,
            )
        )
        machine.append(
            f"mission_eval profile={line.profile} suite={line.suite} tasks={tasks}"
            f" completed={completed} rate={rate:.3f} cost_per_completed={per_cost}"
            f" tokens_per_completed={per_tokens}"
        )
    return [*shown, *machine]
