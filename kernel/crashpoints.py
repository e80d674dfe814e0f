"""Named crash points: where the chaos runs make a worker die on purpose.

Two ways to die, one call site (`hit`):

- `KERNEL_CRASHPLAN` names a JSON file `{"targets": [{"run": 12, "point": "after_intent_commit",
  "seq": 3}, ...], "fired_dir": "/path"}`: the worker SIGKILLs itself there (`make chaos`'s kill
  rounds). A target fires once: its marker file is created (O_EXCL, fsynced) before the kill, so
  the restarted worker goes past it.
- `handling(handler)` installs a function called at every point, in this process: the in-process
  crash sweep (`kernel.proving.sweep`) records where a workload passes, then raises `Crash` at
  one of those places.

Without either, every call is one global lookup.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

POINTS = (
    "claim_committed",
    "before_intent_commit",
    "after_intent_commit",
    "wait_recorded",
    "after_effect_before_result",
    "after_result_commit",
    "lease_renew",
    "cancel_seen",
    "before_finish",
    # Between the other statements of the commit path, for the in-process sweep (a SIGKILL
    # there is possible too: the kill rounds' plans may name them).
    "claim_locked",  # inside the claim's transaction, before its fence bump commits
    "run_loaded",  # a claimed run read with its journal, before its program runs
    "intent_committed",  # the journal's intent statement (and a wait's row) committed
    "deferred_committed",  # a held-back result (a free, replayable step's) written on its own
    "counters_billed",  # free steps' counters in the ledger, before the run parks or ends
    "wait_expired",  # a due wait marked expired, before its step's result
    "verdict_marked",  # an owner's "it did not happen" marked used, before acting again
    "suspend_committed",  # the run parked, before the worker lets it go
    "finish_committed",  # the run ended, before the worker returns
    # Outside the kernel's loop: the maintenance commands' own.
    "backup_mid_write",  # `manage.py backup`, run 0: the archive half written
    "restore_before_finish",  # `manage.py restore`, run 0: database restored, paths not re-rooted
)

Handler = Callable[[str, int, int], None]


class Crash(BaseException):
    """An in-process crash raised by a sweep's handler: a `BaseException`, so that no product
    `except Exception` swallows it; it unwinds the stack as the process's death would end it."""


_handler: Handler | None = None


def load(path: str | None = None) -> None:
    global _handler
    path = path or os.environ.get("KERNEL_CRASHPLAN")
    if not path:
        _handler = None
        return
    spec = json.loads(Path(path).read_text())
    fired = Path(spec["fired_dir"])
    plan = {
        (int(t["run"]), t["point"], int(t.get("seq", 0))): str(
            fired / f"{t['run']}-{t['point']}-{t.get('seq', 0)}"
        )
        for t in spec["targets"]
    }

    def kill(point: str, run: int, seq: int) -> None:
        """SIGKILL this process if the plan says so, once."""
        marker = plan.get((run, point, seq))
        if marker is None:
            return
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return  # fired already, before a restart
        os.fsync(fd)
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    _handler = kill


def hit(point: str, *, run: int, seq: int = 0) -> None:
    """Die here if the plan (or the installed handler) says so. On the hot path of every step:
    without a handler, one global lookup and nothing else."""
    if _handler is None:
        return
    _handler(point, run, seq)


@contextmanager
def handling(handler: Handler) -> Iterator[None]:
    """Call `handler(point, run, seq)` at every crash point while the block runs (one at a time:
    the block restores what was there before)."""
    global _handler
    previous, _handler = _handler, handler
    try:
        yield
    finally:
        _handler = previous


load()
