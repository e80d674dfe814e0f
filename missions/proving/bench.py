"""The engine benchmark: what an agent turn costs over the kernel's floor, and whether it is flat.

The workload (docs/design.md §20): `agent` runs on the instant scripted model, one `noop` tool
call per turn (the last turn answers). A turn is two journaled steps (the model call, then the
tool call), so its floor is two floor steps of `kernel.proving.bench`: four commits.

Figures:

1. per turn, finely interleaved: many short runs (`PAIR_TURNS` turns), each paired with a floor
   block of two steps per turn measured just before it; a run's turn is read back from the
   journal (model intent of turn 1 to the model intent of its last turn, DB `now()` stamps, so
   nothing is added to the hot path to time it, and no claim or finish is in it). The figure is
   the median of the pairs' ratios, with their spread; again with both sides on
   `synchronous_commit = off` (the disk out: CPU and round trips only);
2. flatness: `TURNS`-turn runs, turns 1-50 against turns 151-199 (journal stamps), and their
   commits per turn (transaction ids taken, `kernel.proving.floor.horizon`).

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
from django.db import connection

from kernel import runs
from kernel.models import Run, RunStatus, Step, StepKind
from kernel.proving import bench as kernel_bench
from kernel.proving import floor as floor_side
from kernel.proving.figures import fig, judged, row
from kernel.worker import Worker
from missions.models import Mission, Project

TURNS = 200  # turns of each flatness run
ROUNDS = 7  # flatness runs; late/early is the median of theirs
PAIRS = 40  # floor/engine pairs of the per-turn figure, for each line
PAIR_TURNS = 20  # turns timed in each run of a pair
TOOL = "noop"
RATIO_TARGET = 1.2  # engine µs/turn ÷ (2 x floor µs/step), at most
FLATNESS_TARGET = 1.1  # mean turn of the last quarter ÷ of the first quarter, at most
WARMUP_TURNS = 20
FLOOR_WARMUP = 200  # floor steps before each floor measurement, on its connection

Say = Callable[[str], None]
BenchError = kernel_bench.BenchError
Pairs = kernel_bench.Pairs


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


def measure_pairs(mission: Mission, *, pairs: int, turns: int, no_disk: bool) -> Pairs:
    """`pairs` pairs: a floor block of two steps per turn, then an agent run of `turns` + 1
    turns executed in this thread, its first `turns` turns timed from the journal."""
    out = Pairs()
    with floor_side.raw_connect() as conn:
        floor_side.empty(conn)
        if no_disk:
            floor_side.skip_wal_flush(conn)
            with connection.cursor() as cursor:  # the engine's: this thread's connection
                cursor.execute("SET synchronous_commit TO off")
        floor = floor_side.FloorRun.create(conn, run_id=1)
        floor.steps(FLOOR_WARMUP)
        try:
            for _ in range(pairs):
                started = time.perf_counter()
                floor.steps(2 * turns)
                out.floor_us.append((time.perf_counter() - started) / turns * 1e6)
                agent, _ = execute_agent(mission, turns + 1, work_one)
                recorded = journal_turns(agent.pk)
                out.kernel_us.append(
                    _us(recorded[turns].model_started - recorded[0].model_started) / turns
                )
        finally:
            if no_disk:
                with connection.cursor() as cursor:
                    cursor.execute("RESET synchronous_commit")
    return out


@dataclass(frozen=True)
class Report:
    """Every sample; a figure is the median of its samples, with their spread (25th to 75th
    percentile). A ratio is the median of its pairs' ratios: each pair's run and its floor are
    measured back to back, so a slow spell of the machine's disk weighs on both sides of one
    ratio instead of on one side of the medians."""

    turns: int
    pair_turns: int
    durable: Pairs  # per turn (kernel_us: the engine's) against two floor steps
    no_disk: Pairs
    whole_turn_us: list[float]  # flatness runs: the whole execution over its turns
    commits_per_turn: list[float]
    flatness: list[Flatness]

    @property
    def ratio(self) -> float:
        return self.durable.ratio

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
        rows = [
            f"1. One turn (model step + one {TOOL} tool step): {len(self.durable.ratios)} runs of"
            f" {self.pair_turns} turns per line, each after a floor block of"
            f" {2 * self.pair_turns} steps; median [25th-75th percentile]",
            row("turn floor = 2 floor steps, 4 commits", self.durable.floor_us, "µs/turn"),
            row("engine, journal stamps", self.durable.kernel_us, "µs/turn"),
            row("  engine / turn floor", self.durable.ratios, "",
                 judged(self.ratio, "≤", RATIO_TARGET)),
            row("turn floor, no disk", self.no_disk.floor_us, "µs/turn"),
            row("engine, no disk", self.no_disk.kernel_us, "µs/turn"),
            row("  engine / turn floor, no disk", self.no_disk.ratios, ""),
            f"2. Flatness: {len(self.flatness)} runs of {self.turns} turns; turn k = model intent"
            " of k → model intent of k+1 (journal stamps)",
            row("whole execution / turns", self.whole_turn_us, "µs/turn"),
            row("commits per turn (floor: 4)", self.commits_per_turn, ""),
            row(f"turns {e1}-{e2}", [f.early.turn for f in self.flatness], "µs/turn"),
            row(f"turns {l1}-{l2}", [f.late.turn for f in self.flatness], "µs/turn"),
            row("late / early", [f.ratio for f in self.flatness], "",
                 judged(self.late_early, "≤", FLATNESS_TARGET)),
            "   by phase (median run), early → late µs:",
        ]  # fmt: skip
        for name in ("model", "tools", "between"):
            early, late = getattr(middle.early, name), getattr(middle.late, name)
            rows.append(f"     {name:<8} {fig(early):>7} → {fig(late):>7}  x{fig(late / early)}")
        return rows

    def summary(self) -> str:
        """The last line, read by scripts: keep its keys stable."""
        return (
            f"engine_turn_us={fig(statistics.median(self.durable.kernel_us))}"
            f" turn_floor_us={fig(statistics.median(self.durable.floor_us))}"
            f" turn_ratio={fig(self.ratio)} late_early={fig(self.late_early)}"
            f" turn_ratio_no_disk={fig(self.no_disk.ratio)}"
            f" commits_per_turn={fig(statistics.median(self.commits_per_turn))}"
        )


def run(
    *, turns: int = TURNS, rounds: int = ROUNDS, pairs: int = PAIRS, say: Say = print
) -> Report:
    """Warm up, then the per-turn pairs (durable, then no disk), then `rounds` flatness runs of
    `turns` turns. `say` gets progress lines."""
    kernel_bench.fresh_journal()
    retired = kernel_bench.retire_leftovers()  # `work_one` claims the oldest runnable run
    if retired:
        say(f"cancelled {retired} unfinished run(s) left by an earlier benchmark")
    mission = make_mission()
    pair_turns = min(PAIR_TURNS, turns - 1)
    whole: list[float] = []
    commits: list[float] = []
    flat: list[Flatness] = []
    with floor_side.scratch_tables():
        say(f"warm-up, then 2 x {pairs} runs of {pair_turns} turns, each after its floor …")
        execute_agent(mission, WARMUP_TURNS, work_one)
        durable = measure_pairs(mission, pairs=pairs, turns=pair_turns, no_disk=False)
        no_disk = measure_pairs(mission, pairs=pairs, turns=pair_turns, no_disk=True)
        say(f"flatness: {rounds} runs of {turns} turns …")
        with floor_side.raw_connect() as conn:
            for _ in range(rounds):
                before = floor_side.horizon(conn)
                agent, elapsed = execute_agent(mission, turns, work_one)
                commits.append((floor_side.horizon(conn) - before) / turns)
                whole.append(elapsed / turns * 1e6)
                recorded = journal_turns(agent.pk)
                if len(recorded) != turns:
                    raise BenchError(
                        f"run {agent.pk} journaled {len(recorded)} model steps, not {turns}"
                    )
                flat.append(flatness(recorded))
    return Report(
        turns=turns,
        pair_turns=pair_turns,
        durable=durable,
        no_disk=no_disk,
        whole_turn_us=whole,
        commits_per_turn=commits,
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
