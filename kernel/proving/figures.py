"""How the benchmarks print a figure: its median, the middle half of its samples, its target."""

from __future__ import annotations

import math
import statistics


def round_ratios(kernel: list[float], floor: list[float]) -> list[float]:
    """Each round's (or pair's) kernel figure over its floor."""
    return [k / f for k, f in zip(kernel, floor, strict=True)]


def quartiles(samples: list[float]) -> tuple[float, float]:
    """The 25th and 75th percentiles: where the middle half of the samples lies."""
    if len(samples) < 2:
        return samples[0], samples[0]
    low, _, high = statistics.quantiles(samples, n=4)
    return low, high


def row(label: str, samples: list[float], unit: str, note: str = "") -> str:
    """`label  median unit [spread]  note`: the spread is the middle half of the samples."""
    spread = ""
    if len(samples) > 1:
        low, high = quartiles(samples)
        spread = f" [{fig(low)}-{fig(high)}]"
    line = f"   {label:<36} {fig(statistics.median(samples)):>7} {unit:<8}{spread:<16} {note}"
    return line.rstrip()


def judged(value: float, sense: str, target: float) -> str:
    met = value <= target if sense == "≤" else value >= target
    return f"{verdict(met)} (target {sense} {target:g})"


def fig(value: float, digits: int = 3) -> str:
    """`digits` significant digits, never in exponent form (1234, 987, 1.25, 0.812)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"
