"""What a command costs in a warm level-2 VM, next to level 1 on the same node: each command is
run `commands` times through the control plane's path (`cluster.sandbox.profile`, then
`cluster.dispatch.execute` on the local node), after one cold boot (timed, for reference).

A warm command's overhead is its latency at the caller minus its own run time in the guest
(`guest_seconds`, timed by the guest's command server from fork to exit). The target: a median
overhead of at most TARGET_SECONDS for every command. Level 1's whole latency is printed next to
it (a sandbox of its own per command: bubblewrap's start is its overhead).

Then the browser's (`cluster.browser`): a page its script writes, rendered cold (the VM's boot,
Chromium's start, the page) and again warm (the same VM, the same Chromium), in a browser VM of
the benchmark's own key.

Nothing of a run is used: the VM's key is the benchmark's own, its identity the sandbox user's,
its worktree an empty directory; the VM is released at the end.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster import browser, dispatch, sandbox
from cluster.runner import vmpool
from cluster.sandbox import Limits

TARGET_SECONDS = 0.5
COMMANDS = 10
ARGVS = (["true"], ["python3", "-c", "pass"])
# No network needed: the page and its script are in the URL.
PAGE = "data:text/html,<title>b</title><script>document.title = 'rendered'</script>"
LIMITS = Limits(wall_seconds=120, memory_bytes=512 << 20)


@dataclass
class Series:
    """One command's latencies at one level (seconds), and its own run time in the guest."""

    argv: list[str]
    level: str
    latency: list[float] = field(default_factory=list)
    guest: list[float] = field(default_factory=list)

    def overhead(self) -> list[float]:
        return [total - own for total, own in zip(self.latency, self.guest, strict=True)]

    def line(self) -> str:
        def spread(values: list[float]) -> str:
            return (
                f"median {statistics.median(values) * 1000:.0f} ms"
                f" (min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f})"
            )

        text = f"{self.level:<9} {' '.join(self.argv):<20} latency {spread(self.latency)}"
        if self.guest:
            text += f"; own time {spread(self.guest)}; overhead {spread(self.overhead())}"
        return text


@dataclass
class Report:
    cold_boot: float
    series: list[Series]

    @property
    def worst(self) -> float:
        return max(statistics.median(s.overhead()) for s in self.series if s.guest)

    @property
    def met(self) -> bool:
        return self.worst <= TARGET_SECONDS

    def summary(self) -> str:
        verdict = "met" if self.met else "MISSED"
        return (
            f"vm_warm_overhead_ms={self.worst * 1000:.0f} target_ms={TARGET_SECONDS * 1000:.0f}"
            f" cold_boot_s={self.cold_boot:.1f} {verdict}"
        )


def run(*, commands: int = COMMANDS, say: Callable[[str], object] = print) -> Report:
    """1. A cold boot (the first command of the key). 2. Each command `commands` times, warm.
    3. The same at level 1. 4. Release the VM."""
    top = Path(tempfile.mkdtemp(prefix="agentos-bench-vm-", dir="/tmp"))
    top.chmod(0o711)
    workdir = top / "work"
    workdir.mkdir()
    sandbox.give(workdir)
    key = f"bench-{os.getpid()}"
    try:
        began = time.monotonic()
        first = _once(2, ["true"], workdir, key)
        cold = time.monotonic() - began
        say(f"cold boot: {cold:.1f} s (boot {first['boot_seconds']:.1f} s of it)")
        series = []
        for level in (2, 1):
            for argv in ARGVS:
                measured = Series(list(argv), "warm VM" if level == 2 else "level 1")
                for _ in range(commands):
                    began = time.monotonic()
                    answer = _once(level, argv, workdir, key)
                    measured.latency.append(time.monotonic() - began)
                    if level == 2:
                        if answer.get("boot_seconds"):
                            raise RuntimeError("the warm VM was booted again mid-benchmark")
                        measured.guest.append(float(answer["guest_seconds"]))
                say(measured.line())
                series.append(measured)
        say(_renders(f"{key}-browser"))
        return Report(cold, series)
    finally:
        vmpool.release(dispatch.local_node().state, key)
        shutil.rmtree(top, ignore_errors=True)


def _renders(key: str) -> str:
    """A cold render and a warm one in the browser VM `key`, released after."""
    took = []
    pages = []
    try:
        for _ in range(2):
            built = browser.page_profile(PAGE, browser.SECONDS, run_id=None, key=key, attached=None)
            began = time.monotonic()
            pages.append(browser.page(PAGE, browser.on_a_node(built, None, None)))
            took.append(time.monotonic() - began)
    finally:
        vmpool.release(dispatch.local_node().state, key)
    cold, warm = pages
    if warm.title != "rendered" or warm.fresh or warm.browser_pid != cold.browser_pid:
        raise RuntimeError(f"the warm render did not reuse the cold one's Chromium: {warm}")
    return (
        f"browser   cold render {took[0]:.1f} s (Chromium's start and the page {cold.seconds:.1f}"
        f" s of it); warm render {took[1]:.1f} s (the page {warm.seconds:.1f} s), same Chromium"
    )


def _once(level: int, argv: list[str], workdir: Path, key: str) -> dict[str, Any]:
    tools = sandbox._ready() if level == 1 else None
    built = sandbox.profile(level, argv, workdir, LIMITS, tools)
    if level == 2:
        built["warm"] = key
    needs = dispatch.Needs(level, LIMITS.memory_bytes, LIMITS.disk_bytes)
    answer = dispatch.execute(built, step=None, needs=needs)
    if answer["exit_code"] != 0:
        raise RuntimeError(f"{argv} failed at level {level}: {answer}")
    return answer
