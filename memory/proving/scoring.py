"""The memory evaluation's scores and report: hit@k and MRR per category, latency
percentiles, and one verdict line per target (memory/proving/evaluation.py runs the questions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

HIT_TARGET = 0.85  # hit@10, at least (in the conversations' scopes, and in the padded one)
MRR_TARGET = 0.65  # at least (likewise)
P95_TARGET_MS = 50.0  # at most, with P95_TARGET_NOTES notes in the searched scope
P95_TARGET_NOTES = 100_000
BUSY_P95_TARGET_MS = 80.0  # at most, likewise, while another process keeps a core busy


@dataclass
class Tally:
    questions: int = 0
    hits: int = 0
    reciprocal_ranks: float = 0.0

    def add(self, rank: int | None) -> None:
        self.questions += 1
        if rank is not None:
            self.hits += 1
            self.reciprocal_ranks += 1 / rank

    @property
    def hit_rate(self) -> float:
        return self.hits / self.questions if self.questions else 0.0

    @property
    def mrr(self) -> float:
        return self.reciprocal_ranks / self.questions if self.questions else 0.0


@dataclass
class Scores:
    """Per category, and `all`."""

    by_category: dict[str, Tally] = field(default_factory=dict)
    overall: Tally = field(default_factory=Tally)

    def add(self, category: str, rank: int | None) -> None:
        self.by_category.setdefault(category, Tally()).add(rank)
        self.overall.add(rank)


def p50(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2] if ordered else 0.0


def p95(samples: Sequence[float]) -> float:
    """Nearest-rank 95th percentile: the smallest sample with at least 95 % of them at or below."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


@dataclass
class Report:
    name: str
    k: int
    memory: Scores
    grep: Scores
    latencies_ms: list[float]
    notes: int  # in the largest searched scope: the padded one, if any
    padded: Scores | None = None  # the padded conversation's questions alone
    busy_latencies_ms: list[float] = field(default_factory=list)  # with `busy`

    @property
    def p95_ms(self) -> float:
        return p95(self.latencies_ms)

    def lines(self) -> list[str]:
        k = self.k
        header = f"{'category':<14}{'questions':>10}{f'hit@{k}':>9}{'mrr':>8}"
        header += f"{f'grep_hit@{k}':>14}{'grep_mrr':>10}"
        lines = [header]
        rows = [
            (category, tally, self.grep.by_category[category])
            for category, tally in sorted(self.memory.by_category.items())
        ]
        rows.append(("all", self.memory.overall, self.grep.overall))
        for category, tally, grep_tally in rows:
            lines.append(
                f"{category:<14}{tally.questions:>10}{tally.hit_rate:>9.3f}{tally.mrr:>8.3f}"
                f"{grep_tally.hit_rate:>14.3f}{grep_tally.mrr:>10.3f}"
            )
        if self.padded is not None:
            tally = self.padded.overall
            lines.append(
                f"{'padded scope':<14}{tally.questions:>10}{tally.hit_rate:>9.3f}{tally.mrr:>8.3f}"
                f"   (its questions among {self.notes:,} notes)"
            )
        for label, samples in (("latency", self.latencies_ms), ("busy", self.busy_latencies_ms)):
            if samples:
                lines.append(
                    f"{label}: p50 {p50(samples):.1f} ms, p95 {p95(samples):.1f} ms over"
                    f" {len(samples)} searches, {self.notes:,} notes in the searched scope"
                    + (", another process keeping a core busy" if label == "busy" else "")
                )
        return lines + self.verdicts()

    def verdicts(self) -> list[str]:
        """One line per target: its figure, then met, MISSED or why it was not checked."""
        overall = self.memory.overall
        below = [
            f"{category} {tally.hit_rate:.3f} < {self.grep.by_category[category].hit_rate:.3f}"
            for category, tally in sorted(self.memory.by_category.items())
            if tally.hit_rate < self.grep.by_category[category].hit_rate
        ]
        lines = [
            f"target hit@{self.k} ≥ {HIT_TARGET:g}: {overall.hit_rate:.3f}"
            f" {_verdict(overall.hit_rate >= HIT_TARGET)}",
            f"target mrr ≥ {MRR_TARGET:g}: {overall.mrr:.3f} {_verdict(overall.mrr >= MRR_TARGET)}",
            "target no category below grep: "
            + (f"MISSED ({', '.join(below)})" if below else "met"),
        ]
        if self.padded is not None:
            padded = self.padded.overall
            met = padded.hit_rate >= HIT_TARGET and padded.mrr >= MRR_TARGET
            lines.append(
                f"target the same among {self.notes:,} notes: hit@{self.k} {padded.hit_rate:.3f},"
                f" mrr {padded.mrr:.3f} {_verdict(met)}"
            )
        lines.append(self._latency_verdict("p95", self.latencies_ms, P95_TARGET_MS))
        if self.busy_latencies_ms:
            lines.append(
                self._latency_verdict("busy p95", self.busy_latencies_ms, BUSY_P95_TARGET_MS)
            )
        return lines

    def _latency_verdict(self, label: str, samples: Sequence[float], target: float) -> str:
        figure = p95(samples)
        return f"target {label} ≤ {target:g} ms at {P95_TARGET_NOTES:,} notes: {figure:.1f} ms" + (
            f" {_verdict(figure <= target)}"
            if self.notes >= P95_TARGET_NOTES
            else f" not checked at {self.notes:,} notes (--pad-to {P95_TARGET_NOTES})"
        )

    def summary(self) -> str:
        """The last line, read by scripts: keep its keys stable."""
        return (
            f"memory hit@{self.k}={self.memory.overall.hit_rate:.3f}"
            f" mrr={self.memory.overall.mrr:.3f} p95_ms={self.p95_ms:.1f} notes={self.notes}"
            f" grep_hit@{self.k}={self.grep.overall.hit_rate:.3f}"
        )


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"
