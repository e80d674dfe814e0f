"""A progress bar for long memory work (`manage.py memory_reindex`): named phases, each with
done/total, rate and time left. On a terminal one line redrawn in place; otherwise (a log, a
pipe) a line when a phase starts and ends and, between, every `EVERY` seconds or `STEP` of it
(at most one a second), so a log of a long reindex says where it is without filling up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.core.management.base import OutputWrapper

EVERY = 10.0  # seconds between two lines of a phase, off a terminal
STEP = 0.10  # or this much of the phase done since the last line
STEADY = 1.0  # but not more often than this: a phase of seconds is two lines, not ten
REDRAW = 0.2  # seconds between two redraws on a terminal
WIDTH = 24  # the bar's cells, on a terminal


class Progress:
    """Phases one after the other: `phase(name, total)`, then `advance(n)` as work is done,
    then `finish()` (a new phase finishes the one before)."""

    def __init__(
        self,
        write: Callable[[str], object] | None,
        *,
        tty: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = write  # written as given: no newline added, flushed by the writer
        self.tty = tty
        self.clock = clock
        self.name = ""
        self.total = 0
        self.done = 0
        self.started = 0.0
        self.shown_at = 0.0
        self.shown_done = 0
        self.open = False

    @classmethod
    def quiet(cls) -> Progress:
        return cls(None)

    @classmethod
    def on(cls, stream: OutputWrapper) -> Progress:
        """On a command's stream (its stderr: its stdout stays its results), redrawn in place
        when the stream is a terminal."""

        def write(text: str) -> None:
            stream.write(text, style_func=str, ending="")
            stream.flush()

        return cls(write, tty=stream.isatty())

    def phase(self, name: str, total: int) -> None:
        self.finish()
        self.name, self.total, self.done = name, total, 0
        self.started = self.shown_at = self.clock()
        self.shown_done = 0
        self.open = True
        self._show(force=self.tty or total > 0)  # an empty phase: its last line says it all

    def advance(self, count: int = 1) -> None:
        self.done += count
        self._show(force=False)

    def finish(self) -> None:
        if not self.open:
            return
        self.open = False
        self._show(force=True, last=True)

    def line(self) -> str:
        """The phase as it stands: `name  done/total  pct  rate  time left` (or elapsed, once
        done)."""
        elapsed = max(self.clock() - self.started, 0.0)
        rate = self.done / elapsed if elapsed > 0 and self.done else 0.0
        parts = [f"{self.name:<22}", f"{self.done:>9,}/{self.total:,}"]
        if self.total:
            share = min(self.done / self.total, 1.0)
            if self.tty:
                filled = round(share * WIDTH)
                parts.append("[" + "#" * filled + "." * (WIDTH - filled) + "]")
            parts.append(f"{share:>4.0%}")
        if rate:
            parts.append(f"{rate:,.1f}/s")
        if self.done >= self.total:
            parts.append(f"done in {duration(elapsed)}")
        elif rate:
            parts.append(f"{duration((self.total - self.done) / rate)} left")
        return "  ".join(parts)

    def _show(self, *, force: bool, last: bool = False) -> None:
        if self.write is None:
            return
        now = self.clock()
        if self.tty:
            if force or now - self.shown_at >= REDRAW:
                self.write("\r" + self.line() + "\x1b[K" + ("\n" if last else ""))
                self.shown_at = now
            return
        since = now - self.shown_at
        due = since >= EVERY or (
            since >= STEADY and self.total and (self.done - self.shown_done) >= STEP * self.total
        )
        # A phase's last line is its `finish`'s, said once.
        if force or (due and self.done < self.total):
            self.write(self.line() + "\n")
            self.shown_at, self.shown_done = now, self.done


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 20 min`."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
