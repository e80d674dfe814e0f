"""The prompt-cache benchmark: how much of a mission's input the provider's cache serves.

The workload: one 30-turn `agent` run per provider, through the real engine, the real adapter and
the real SDK, against a local server that bills the prompt cache as the provider does
(`cache_wire`). The run is launched as a mission's run is (data in blocks, memory as data, the
stall watch, thinking on), with project instructions and a set of tools that make its frozen
prefix about 4,500 tokens. Turns 1 to 29 each say a few words and read the next 3,000 bytes
of an artifact (`read_artifact`), about 900 tokens a turn; turn 30 answers. The model's window
(`WINDOW`) is small enough that the thread passes the clearing threshold, then is compacted once,
in the middle of the 30 turns.

What bounds the figures: every turn's new tokens are read once uncached (OpenAI) or written
(Anthropic), so a turn's share is at most 1 - 900 / its prompt. Right after a compaction the
prompt is the frozen prefix and the summary: with this prefix, about 0.84 the turn after, 0.9
five turns later. A workload of larger reads per turn, or a smaller prefix, reads less.

Figures, each a share of input tokens (uncached + cache read + cache written) that were cache
reads, summed over the turns it names:

1. after turn 2: turns 3 to 30 but the turn right after each compaction, which writes the new
   prefix (target ≥ `TARGET`);
2. after compaction: the turns after that one (target ≥ `TARGET`);
3. the turn right after compaction, and the compaction request itself (the whole thread sent to
   be summarised): reported, no target;
4. the whole run, as its run page shows it: reported, no target.

Each run's step ledger is checked against what the server billed: the engine must record every
token the provider reported. It writes runs: `manage.py bench_cache` refuses to run outside a
dedicated data dir, like the other benchmarks (`make bench` uses `.data/bench`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from kernel import artifacts, runs
from kernel.models import Run, RunStatus, Step, StepKind
from kernel.proving import bench as kernel_bench
from kernel.proving.figures import fig, verdict
from kernel.worker import Worker
from memory.tools import MEMORY_TOOL_NAMES
from missions import a2a_call, launch, web
from missions.engine import relief
from missions.models import Mission, Project
from missions.proving import cache_wire
from missions.proving.cache_wire import AnthropicServer, CacheServer, Call, OpenAIServer, Reply
from tools.builtin import CODING_TOOLS

TURNS = 30
REPEATS = 3
TARGET = 0.90
# Tokens: compaction (past 55 %) comes once, around turn 18; clearing's threshold (40 %) is passed.
WINDOW = 36_000
CHUNK = 3000  # bytes of the artifact each turn reads
PROVIDERS = ("anthropic", "openai")
MODELS = {"anthropic": "claude-cache-bench", "openai": "gpt-cache-bench"}
# A coding mission's tools as a launch offers them (the ledger's aside: its supervisor's watch
# would ask the owner about a run that only reads), and the one this workload calls.
TOOLS = [
    *CODING_TOOLS,
    *MEMORY_TOOL_NAMES,
    "delegate",
    "consult_advisor",
    web.FETCH,
    a2a_call.NAME,
    "read_artifact",
]
SUMMARY = (
    "Decisions: read the log in order, 3,000 bytes a turn.\nFiles touched: none.\n"
    "Verified facts: the log's entries are in order (steps 2 to 40).\nOpen problems: none.\n"
    "Next steps: read on from where the last part ended, then answer."
)

Say = Callable[[str], None]
BenchError = kernel_bench.BenchError


def instructions() -> str:
    """Project instructions of a realistic length (the frozen prefix is their bulk)."""
    rules = [
        f"{n}. When a service named svc-{n:02d} logs a warning, note its timestamp and request"
        f" id, compare it with the previous warning of svc-{n:02d}, and say whether the gap"
        " grew; never restart a service yourself."
        for n in range(1, 16)
    ]
    return launch.CODING_INSTRUCTIONS + "\nHow we read the service logs:\n" + "\n".join(rules)


def log(seed: int) -> bytes:
    """The artifact the agent reads: a deterministic service log, told apart by `seed`."""
    lines = [f"# service log of benchmark mission {seed}"]
    for n in range(1, 1200):
        digest = hashlib.sha256(f"{seed}-{n}".encode()).hexdigest()[:16]
        lines.append(
            f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z svc-{n % 30 + 1:02d}"
            f" request={digest} status={200 if n % 7 else 503} took={n % 97}ms"
        )
    return "\n".join(lines).encode()


def script(sha256: str, turns: int = TURNS, chunk: int = CHUNK) -> cache_wire.Script:
    """The model's answers: a request with tools is a turn (a few words and the next part of the
    log, then the answer at the last); one without is the compaction (its summary)."""
    asked = 0

    def answer(body: dict[str, Any], answered: int) -> Reply:
        nonlocal asked
        if not body.get("tools"):
            return Reply(SUMMARY)
        asked += 1
        if asked >= turns:
            return Reply("Done: the gaps between svc warnings did not grow.")
        return Reply(
            f"Part {asked} read; the warnings so far are in order. Reading the next part.",
            Call(
                "read_artifact",
                {"sha256": sha256, "offset": (asked - 1) * chunk, "length": chunk},
            ),
        )

    return answer


# --- One run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tokens:
    uncached: int = 0
    read: int = 0
    written: int = 0

    @property
    def prompt(self) -> int:
        return self.uncached + self.read + self.written

    @property
    def share(self) -> float:
        return self.read / self.prompt if self.prompt else 0.0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.uncached + other.uncached, self.read + other.read, self.written + other.written
        )


@dataclass(frozen=True)
class Measured:
    """One run's figures."""

    after_turn_2: Tokens
    after_compaction: Tokens
    rewrite_turn: Tokens  # the first turn after each compaction
    compaction: Tokens  # the compaction requests
    whole: Tokens  # the run's ledger
    compacted_before: list[int]  # the turns compactions came before
    turns: list[tuple[int, Tokens]]
    cleared: bool = False  # old tool results were cleared from the thread the server read


def measure(run: Run) -> Measured:
    """The run's figures, read back from its journal."""
    turns: list[tuple[int, Tokens]] = []
    compaction = Tokens()
    compacted: list[int] = []
    for step in Step.objects.filter(run=run).order_by("seq"):
        spent = Tokens(step.input_tokens, step.cache_read_tokens, step.cache_write_tokens)
        if step.kind == StepKind.MODEL_CALL:
            turns.append((int(step.request["turn"]), spent))
        elif step.kind == StepKind.COMPACTION:
            compaction = compaction + spent
            compacted.append(int(step.request["turn"]))
    rewrites = set(compacted)  # each compaction's next turn writes the new prefix
    boundary = compacted[0] if compacted else len(turns)
    after_2 = sum((t for n, t in turns if n > 2 and n not in rewrites), Tokens())
    after = sum((t for n, t in turns if n > boundary and n not in rewrites), Tokens())
    rewrite = sum((t for n, t in turns if n in rewrites), Tokens())
    whole = Tokens(run.input_tokens, run.cache_read_tokens, run.cache_write_tokens)
    return Measured(after_2, after, rewrite, compaction, whole, compacted, turns)


@contextmanager
def pointed_at(provider: str, server: CacheServer) -> Iterator[None]:
    """The SDK of `provider` sent to `server` (its own environment variables, as an owner's
    deployment would set them), and back as it was afterwards."""
    prefix = provider.upper()
    values = {
        f"{prefix}_BASE_URL": server.url + ("/v1" if provider == "openai" else ""),
        f"{prefix}_API_KEY": f"{provider}-cache-benchmark-key",
    }
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_one(
    provider: str,
    *,
    window: int = WINDOW,
    turns: int = TURNS,
    chunk: int = CHUNK,
    cache_aware: bool = True,
) -> Measured:
    """One mission on `provider`'s cache server; its figures, checked against the server's.
    `cache_aware` False: a run as started before `Spec.cache_aware_clearing`."""
    project, _ = Project.objects.get_or_create(name="prompt-cache benchmark")
    mission = Mission.objects.create(project=project, goal="Read the service log and report.")
    data = log(mission.pk)
    sha256 = hashlib.sha256(data).hexdigest()
    server_type = AnthropicServer if provider == "anthropic" else OpenAIServer
    server = server_type(script(sha256, turns, chunk))
    with cache_wire.serving(server), pointed_at(provider, server):
        run = runs.start_run(
            account=mission,
            program="agent",
            input={
                "goal": (
                    f"Read the service log in artifact {sha256}, {chunk} bytes at a time, and"
                    " report whether the gaps between warnings grew."
                ),
                "provider": provider,
                "model": MODELS[provider],
                "thinking": True,
                "tools": TOOLS,
                "instructions": instructions(),
                "memory_as_data": True,
                "data_framing": True,
                "stalls": True,
                "cache_aware_clearing": cache_aware,
                "max_turns": turns + 5,  # the script, not the cap, ends the run
                "context_window": window,
            },
        )
        # Stored for the run before it starts: `read_artifact` reads its mission's own.
        artifacts.store(content=data, name="service log", media_type="text/plain", run=run)
        outcomes = Worker(lease_seconds=60).run_until_idle()
    run.refresh_from_db()
    output = run.output if isinstance(run.output, dict) else {}
    if outcomes != ["done"] or run.status != RunStatus.DONE or output.get("turns") != turns:
        raise BenchError(
            f"{provider} run {run.pk} did not answer after {turns} turns: outcomes {outcomes},"
            f" status {run.status!r}, error {run.error!r}, output {run.output!r}"
        )
    # The compaction request's transcript has old results cleared whatever the run: turns only.
    sent = json.dumps([body for body in server.bodies if body.get("tools")])
    measured = replace(measure(run), cleared=json.dumps(relief.CLEARED)[1:-1] in sent)
    billed = Tokens(
        sum(b.uncached for b in server.billed),
        sum(b.cache_read for b in server.billed),
        sum(b.cache_write for b in server.billed),
    )
    if billed != measured.whole:
        raise BenchError(
            f"{provider} run {run.pk} recorded {measured.whole} but the server billed {billed}"
        )
    return measured


# --- The report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    runs: dict[str, list[Measured]]

    def met(self) -> bool:
        return all(
            min(m.after_turn_2.share, m.after_compaction.share) >= TARGET
            for measured in self.runs.values()
            for m in measured
        )

    def lines(self) -> list[str]:
        out = [f"prompt cache: share of input tokens read from the cache, {REPEATS} runs each"]
        for provider, measured in self.runs.items():
            boundaries = sorted({tuple(m.compacted_before) for m in measured})
            said = " or ".join(", ".join(map(str, turns)) for turns in boundaries)
            out.append(f"  {provider} (compacted before turn {said})")
            out.append(_row("after turn 2", [m.after_turn_2.share for m in measured], True))
            out.append(_row("after compaction", [m.after_compaction.share for m in measured], True))
            out.append(
                _row("turn right after compaction", [m.rewrite_turn.share for m in measured])
            )
            weight = statistics.median(m.compaction.prompt for m in measured)
            out.append(
                _row(f"compaction ({weight:,.0f} tokens)", [m.compaction.share for m in measured])
            )
            out.append(_row("whole run (run page)", [m.whole.share for m in measured]))
        return out

    def per_turn(self) -> list[str]:
        """The first run of each provider, turn by turn."""
        out = []
        for provider, measured in self.runs.items():
            first = measured[0]
            out.append(f"  {provider}, run 1: turn  uncached  read  written  share")
            for number, spent in first.turns:
                mark = "  <- new prefix" if number in first.compacted_before else ""
                out.append(
                    f"    {number:>4} {spent.uncached:>9} {spent.read:>6} {spent.written:>8}"
                    f"  {spent.share:.3f}{mark}"
                )
        return out

    def summary(self) -> str:
        pairs: list[str] = []
        for provider, measured in self.runs.items():
            pairs.append(
                f"cache_share_{provider}="
                f"{statistics.median(m.after_turn_2.share for m in measured):.3f}"
            )
            pairs.append(
                f"cache_share_after_compaction_{provider}="
                f"{statistics.median(m.after_compaction.share for m in measured):.3f}"
            )
        pairs.append(f"cache_target={TARGET:g}")
        pairs.append(f"cache_met={'yes' if self.met() else 'no'}")
        return " ".join(pairs)


def _row(label: str, samples: list[float], targeted: bool = False) -> str:
    median = statistics.median(samples)
    spread = f"{fig(min(samples))}-{fig(max(samples))}"
    note = f"{verdict(min(samples) >= TARGET)} (target ≥ {TARGET:g})" if targeted else "(no target)"
    return f"    {label:<30} median {fig(median):>6}  spread {spread:<13} {note}"


def run(*, repeats: int = REPEATS, say: Say = print) -> Report:
    """`repeats` missions per provider; `say` gets progress lines."""
    kernel_bench.fresh_journal()
    retired = kernel_bench.retire_leftovers()
    if retired:
        say(f"cancelled {retired} unfinished run(s) left by an earlier benchmark")
    measured: dict[str, list[Measured]] = {}
    # The SDKs log each request at INFO: a benchmark's output is its figures.
    quiet = logging.getLogger("httpx2")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        for provider in PROVIDERS:
            say(f"{provider}: {repeats} missions of {TURNS} turns …")
            measured[provider] = [run_one(provider) for _ in range(repeats)]
            for m in measured[provider]:
                if not m.compacted_before:
                    raise BenchError(
                        f"a {provider} mission never compacted: the workload no longer crosses"
                        f" a compaction boundary (WINDOW = {WINDOW})"
                    )
    finally:
        quiet.setLevel(level)
    return Report(measured)
