"""One process runs the whole product: web server and worker pool, restarted if they die.

Used by `manage.py serve` (and so by `make run`). The embedded database belongs to this process:
it was started by settings on import, is started again if it dies (`EmbeddedDatabase`), and
stops when this process exits, after its children.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from agentos.core.lifetime import die_with_parent

logger = logging.getLogger("agentos.processes")

RESTART_BACKOFF_MAX = 30.0
STABLE_AFTER = 60.0  # a child that ran this long is healthy again: its backoff resets
STOP_TIMEOUT = 15.0


@dataclass
class Child:
    name: str
    argv: list[str]
    stop_signal: signal.Signals = signal.SIGTERM
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff: float = 1.0
    restart_at: float = 0.0
    restarts: int = 0

    def start(self, env: dict[str, str], now: float) -> None:
        # A session of its own: the terminal's Ctrl-C reaches only this process, which then
        # stops the children in order instead of them racing to exit.
        self.process = subprocess.Popen(
            self.argv, env=env, start_new_session=True, preexec_fn=die_with_parent
        )
        self.started_at = now
        logger.info("started %s (pid %s)", self.name, self.process.pid)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class EmbeddedDatabase:
    """The embedded PostgreSQL this process started (no `DATABASE_URL`): if it dies (killed, out
    of memory), it is started again, with a growing delay between failed starts. Meanwhile the
    children wait for it (`agentos.core.reachability`)."""

    pgdata: Path
    start: Callable[[], None]
    backoff: float = 1.0
    restart_at: float = 0.0
    down_since: float | None = None

    def running(self) -> bool:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # alive, as its own user
        return True

    def tend_one(self, now: float) -> bool:
        """Start the server again if it is not running and its delay has passed; True if
        something was done."""
        if self.running():
            self.backoff, self.down_since = 1.0, None
            return False
        if self.down_since is None:
            self.down_since = now
            logger.warning("the embedded database stopped; starting it again")
        if now < self.restart_at:
            return False
        try:
            self.start()
        except Exception as error:  # e.g. its old processes still hold its shared memory
            self.restart_at = now + self.backoff
            said = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            logger.warning(
                "the embedded database did not start (%s); trying again in %.0f s",
                said,
                self.backoff,
            )
            self.backoff = min(self.backoff * 2, RESTART_BACKOFF_MAX)
            return True
        logger.warning("the embedded database is running again")
        self.backoff, self.down_since = 1.0, None
        return True


@dataclass
class ProcessGroup:
    children: list[Child]
    env: dict[str, str]
    ready_url: str
    on_ready: Callable[[], None] = lambda: None
    database: EmbeddedDatabase | None = None
    stopping: bool = False
    ready: bool = False
    _clock: Callable[[], float] = field(default=time.monotonic)

    def run(self) -> int:
        """Start every child, then tend them until SIGINT/SIGTERM; return the exit status.

        1. Start the children.
        2. Loop: announce readiness once, restart any child that died (with backoff).
        3. On a stop signal, stop the children (web first, then workers) and return.
        """
        previous = {
            sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            for child in self.children:
                child.start(self.env, self._clock())
            while not self.stopping:
                busy = self.check_ready_one() | self.tend_one()
                if self.database is not None:
                    busy |= self.database.tend_one(self._clock())
                if not busy:
                    time.sleep(0.5)
        finally:
            self.stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0

    def _request_stop(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            logger.info("stopping (signal %s)", signal.Signals(signum).name)
        self.stopping = True

    def check_ready_one(self) -> bool:
        """Until the web server answers, poll it; True when it just became ready."""
        if self.ready:
            return False
        try:
            with urllib.request.urlopen(self.ready_url, timeout=2):  # noqa: S310  # our own URL
                pass
        except urllib.error.HTTPError:
            pass  # any HTTP answer (even 503 while workers start) means the server is up
        except (urllib.error.URLError, OSError):
            return False
        self.ready = True
        self.on_ready()
        return True

    def tend_one(self) -> bool:
        """Restart one dead child whose backoff has elapsed; True if something was done."""
        now = self._clock()
        for child in self.children:
            if child.alive() or self.stopping:
                continue
            if child.restart_at == 0.0:
                code = child.process.returncode if child.process else None
                if now - child.started_at >= STABLE_AFTER:
                    child.backoff = 1.0
                child.restart_at = now + child.backoff
                logger.warning(
                    "%s exited (status %s); restarting in %.0f s", child.name, code, child.backoff
                )
                child.backoff = min(child.backoff * 2, RESTART_BACKOFF_MAX)
                return True
            if now >= child.restart_at:
                child.restart_at = 0.0
                child.restarts += 1
                child.start(self.env, now)
                return True
        return False

    def stop_all(self) -> None:
        for child in self.children:
            if child.process is not None and child.alive():
                with contextlib.suppress(ProcessLookupError):  # it may exit in between
                    os.killpg(child.process.pid, child.stop_signal)
        deadline = time.monotonic() + STOP_TIMEOUT
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop in %.0f s; killing it", child.name, STOP_TIMEOUT)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
        logger.info("all stopped")
