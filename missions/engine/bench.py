"""The engine benchmark: what an agent turn costs over the kernel's floor, and whether it is flat.

The workload (docs/design.md §20): one `agent` run on the instant scripted model, one `noop` tool
call per turn, 200 turns (the last one answers).
A turn is two journaled steps (the model call, then the tool call), so its floor is two floor
steps of `kernel.bench`, measured in the same run, alternating with the engine over the rounds.

Two figures:

1. per turn: the whole in-process execution (`Worker.work_one`: claim, load, the loop, finish)
   timed by the client, divided by the turns; against 2 x the floor step;
2. flatness: each turn's duration read back from the journal, from its model step's `started_at`
   to the next turn's (DB `now()` stamps, so nothing is added to the hot path to time it). The
   last turn has no next model step, so the late window stops at the turn before it.

It writes runs and scratch tables: `manage.py bench_engine` refuses to run outside a dedicated
data dir, like `bench_kernel` (`make bench` uses `.data/bench`).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from kernel import runs
from kernel.models import Run, RunStatus, Step, StepKind
from kernel.proving import bench as kernel_bench
from kernel.worker import Worker
from missions.models import Mission, Project

TURNS = 200
ROUNDS = 7  # floor/engine alternations; the ratio is the median of theirs
TOOL = "noop"
RATIO_TARGET = 1.5  # engine µs/turn ÷ (2 x floor µs/step), at most
FLATNESS_TARGET = 1.1  # mean turn of the last quarter ÷ of the first quarter, at most
WARMUP_TURNS = 20
FLOOR_WARMUP = 200  # floor steps before each floor measurement, on its connection

Say = Callable[[str], None]
BenchError = kernel_bench.BenchError
fig = kernel_bench.fig
verdict = kernel_bench.verdict


# --- the workload ---------------------------------------------------------------------------


def script(turns: int) -> dict[str, Any]:
    """Turns 1 .. turns-1 call `noop` once; the last turn answers with text."""
    calls = [
        {"tool_calls": [{"name": TOOL, "arguments": {"note": str(n)}}]} for n in range(1, turns)
    ]
    return {"turns": [*calls, {"text": "Done."}]}


def make_mission() -> Mission:
    project, _ = Project.objects.get_or_create(name="engine benchmark")
    return Mission.objects.create(project=project, goal="benchmark the agent loop")


def start_agent(mission: Mission, turns: int) -> Run:
    return runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": f"Call {TOOL} once per turn, then answer.",
            "provider": "scripted",
            "model": "scripted",
            "tools": [TOOL],
            "script": script(turns),
            "max_turns": turns + 1,  # the script, not the cap, ends the run
        },
    )


def execute_agent(
    mission: Mission, turns: int, work: Callable[[], str | None]
) -> tuple[Run, float]:
    """Start an agent run, execute it in this thread through `work`; the run and seconds."""
    run = start_agent(mission, turns)
    started = time.perf_counter()
    outcome = work()
    elapsed = time.perf_counter() - started
    run.refresh_from_db()
    output = run.output if isinstance(run.output, dict) else {}
    if outcome != "done" or run.status != RunStatus.DONE or output.get("turns") != turns:
        raise BenchError(
            f"agent run {run.pk} did not answer after {turns} turns: outcome {outcome!r},"
            f" status {run.status!r}, error {run.error!r}, output {run.output!r} (the log above"
            " says why)"
        )
    return run, elapsed


def work_one() -> str | None:
    return Worker(lease_seconds=60).work_one()


# --- turns as the journal recorded them -----------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn's DB timestamps: the model step's intent and result, its tool steps' last result."""

    model_started: datetime
    model_finished: datetime
    tools_finished: datetime


def journal_turns(run_id: int) -> list[Turn]:
    """The run's turns, read from its steps in one query (after the run: not on the clock)."""
    rows = Step.objects.filter(run_id=run_id).order_by("seq")
    turns: list[Turn] = []
    for kind, started, finished in rows.values_list("kind", "started_at", "finished_at"):
        if finished is None:
            raise BenchError(f"run {run_id} has a step without a result")
        if kind == StepKind.MODEL_CALL:
            turns.append(Turn(started, finished, finished))
        elif turns:
            turns[-1] = Turn(turns[-1].model_started, turns[-1].model_finished, finished)
    return turns


def _us(delta: timedelta) -> float:
    return delta / timedelta(microseconds=1)


@dataclass(frozen=True)
class Phases:
    """Mean µs of a window of turns, split where the journal's stamps allow."""

    model: float  # model intent statement → model result statement (intent commit, the call)
    tools: float  # model result statement → last tool result statement (result commit, tools)
    between: float  # last tool result statement → next model intent (commit, loop, next turn)

    @property
    def turn(self) -> float:
        return self.model + self.tools + self.between


def phases(turns: list[Turn], first: int, last: int) -> Phases:
    """Turns `first`..`last` (1-based, inclusive); each needs the next turn to be recorded."""
    window = [(turns[k - 1], turns[k]) for k in range(first, last + 1)]
    return Phases(
        model=statistics.fmean(_us(t.model_finished - t.model_started) for t, _ in window),
        tools=statistics.fmean(_us(t.tools_finished - t.model_finished) for t, _ in window),
        between=statistics.fmean(_us(n.model_started - t.tools_finished) for t, n in window),
    )


@dataclass(frozen=True)
class Flatness:
    early: Phases
    late: Phases
    window: tuple[int, int, int, int]  # first..last of the early and of the late window

    @property
    def ratio(self) -> float:
        return self.late.turn / self.early.turn


def flatness(turns: list[Turn]) -> Flatness:
    """Turns 1-50 against turns 151-199 of 200 (a quarter of the run each, the last excluded)."""
    size = len(turns) // 4
    late_last = len(turns) - 1  # the last turn has no next model step to end it
    window = (1, size, len(turns) - size + 1, late_last)
    return Flatness(
        early=phases(turns, 1, size), late=phases(turns, window[2], late_last), window=window
    )


# --- the whole benchmark --------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """Samples of every round; figures are medians. The ratio is the median of the rounds'
    ratios: each round's run and its floor are measured back to back, so a slow spell of the
    machine's disk (its fsyncs vary by tens of percent from one second to the next) weighs on
    both sides of one ratio instead of on one side of the medians."""

    turns: int
    floor_step_us: list[float]
    engine_turn_us: list[float]
    journal_turn_us: list[float]
    flatness: list[Flatness]

    @property
    def engine(self) -> float:
        return statistics.median(self.engine_turn_us)

    @property
    def turn_floor(self) -> float:
        return 2 * statistics.median(self.floor_step_us)

    @property
    def ratios(self) -> list[float]:
        return kernel_bench.round_ratios(self.engine_turn_us, [2 * x for x in self.floor_step_us])

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def late_early(self) -> float:
        return statistics.median(f.ratio for f in self.flatness)

    @property
    def ratio_met(self) -> bool:
        return self.ratio <= RATIO_TARGET

    @property
    def flat_met(self) -> bool:
        return self.late_early <= FLATNESS_TARGET

    def lines(self) -> list[str]:
        middle = sorted(self.flatness, key=lambda f: f.ratio)[len(self.flatness) // 2]
        e1, e2, l1, l2 = middle.window
        floor = [2 * x for x in self.floor_step_us]
        rows = [
            f"1. One turn (model step + one {TOOL} tool step), {self.turns} turns per run",
            _row("floor step, raw psycopg 3, 2 commits", self.floor_step_us, "µs/step"),
            _row("turn floor = 2 x floor step", floor, "µs/turn"),
            _row("engine, agent run in-process", self.engine_turn_us, "µs/turn"),
            _row(
                f"  same, journal stamps, turns 1-{self.turns - 1}", self.journal_turn_us, "µs/turn"
            ),
            _row("engine / turn floor", self.ratios, "", _target(self.ratio, RATIO_TARGET)),
            "2. Flatness: turn k = model intent of k → model intent of k+1 (journal stamps)",
            _row(f"turns {e1}-{e2}", [f.early.turn for f in self.flatness], "µs/turn"),
            _row(f"turns {l1}-{l2}", [f.late.turn for f in self.flatness], "µs/turn"),
            _row("late / early", [self.late_early], "", _target(self.late_early, FLATNESS_TARGET)),
            "   by phase (median round), early → late µs:",
        ]
        for name in ("model", "tools", "between"):
            early, late = getattr(middle.early, name), getattr(middle.late, name)
            rows.append(f"     {name:<8} {fig(early):>7} → {fig(late):>7}  x{fig(late / early)}")
        return rows

    def summary(self) -> str:
        """The last line, read by scripts: keep its keys stable."""
        return (
            f"engine_turn_us={fig(self.engine)} turn_floor_us={fig(self.turn_floor)}"
            f" turn_ratio={fig(self.ratio)} late_early={fig(self.late_early)}"
        )


def _row(label: str, samples: list[float], unit: str, note: str = "") -> str:
    rounds = f"  rounds: {' '.join(fig(x) for x in samples)}" if len(samples) > 1 else ""
    line = f"   {label:<40} {fig(statistics.median(samples)):>7} {unit:<8}{note}{rounds}"
    return line.rstrip()


def _target(value: float, target: float) -> str:
    return f"{verdict(value <= target)} (target ≤ {target:g})"


def run(*, turns: int = TURNS, rounds: int = ROUNDS, say: Say = print) -> Report:
    """Warm up, then alternate floor and engine over `rounds` rounds, so that a noisy
    neighbour on the machine weighs on both alike. `say` gets progress lines."""
    kernel_bench.call_migrate()
    retired = kernel_bench.retire_leftovers()  # `work_one` claims the oldest runnable run
    if retired:
        say(f"cancelled {retired} unfinished run(s) left by an earlier benchmark")
    mission = make_mission()
    floor_step_us: list[float] = []
    engine_turn_us: list[float] = []
    journal_turn_us: list[float] = []
    flat: list[Flatness] = []
    with kernel_bench.scratch_tables():
        say(f"warm-up, then {rounds} rounds: {2 * turns} floor steps, one {turns}-turn run …")
        kernel_bench.measure_floor_step(FLOOR_WARMUP, warmup=FLOOR_WARMUP)
        execute_agent(mission, WARMUP_TURNS, work_one)
        for _ in range(rounds):
            floor_step_us.append(kernel_bench.measure_floor_step(2 * turns, warmup=FLOOR_WARMUP))
            agent, elapsed = execute_agent(mission, turns, work_one)
            engine_turn_us.append(elapsed / turns * 1e6)
            recorded = journal_turns(agent.pk)
            if len(recorded) != turns:
                raise BenchError(
                    f"run {agent.pk} journaled {len(recorded)} model steps, not {turns}"
                )
            journal_turn_us.append(
                _us(recorded[-1].model_started - recorded[0].model_started) / (turns - 1)
            )
            flat.append(flatness(recorded))
    return Report(
        turns=turns,
        floor_step_us=floor_step_us,
        engine_turn_us=engine_turn_us,
        journal_turn_us=journal_turn_us,
        flatness=flat,
    )


# --- where the time goes --------------------------------------------------------------------


def profile(mission: Mission, turns: int = TURNS, *, top: int = 30) -> str:
    """cProfile of one agent run: our own functions by cumulative time per turn, then the
    library functions by own time (round trips show up as psycopg's `wait`).

    Since Python 3.12 cProfile sees every thread (the lease keeper's, the read pool's), and its
    overhead inflates every figure: compare the rows with each other, not with the report.
    """
    profiler = cProfile.Profile()
    execute_agent(mission, turns, lambda: profiler.runcall(work_one))
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    base = str(settings.BASE_DIR) + "/"
    # typeshed does not declare `Stats.stats`, pstats' table: (file, line, name) -> counts, times.
    table: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    own = sorted(
        (
            (cumulative, calls, f"{path.removeprefix(base)}:{line}({name})")
            for (path, line, name), (_, calls, _, cumulative, _) in table.items()
            if path.startswith(base) and "/.venv/" not in path and not path.endswith("bench.py")
        ),
        reverse=True,
    )
    out.write(f"cProfile of one {turns}-turn agent run: our functions by cumulative time\n")
    out.write(f"   {'µs/turn':>8} {'calls/turn':>10}  function\n")
    for cumulative, calls, where in own[:top]:
        out.write(f"   {fig(cumulative / turns * 1e6):>8} {fig(calls / turns):>10}  {where}\n")
    out.write("Everything by own time:\n")
    stats.strip_dirs().sort_stats(pstats.SortKey.TIME).print_stats(top // 2)
    return out.getvalue()


def is_dedicated_database() -> bool:
    return kernel_bench.is_dedicated_database()
