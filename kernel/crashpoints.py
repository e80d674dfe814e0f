"""Named crash points: where the chaos tests make a worker SIGKILL itself.

`KERNEL_CRASHPLAN` names a JSON file `{"targets": [{"run": 12, "point": "after_intent_commit",
"seq": 3}, ...], "fired_dir": "/path"}`. A target fires once: its marker file is created (O_EXCL,
fsynced) before the kill, so the restarted worker goes past it. Without the variable every call
is one global lookup.
"""

from __future__ import annotations

import json
import os
import signal
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
    "backup_mid_write",  # `manage.py backup`, run 0: the archive half written
    "restore_before_finish",  # `manage.py restore`, run 0: database restored, paths not re-rooted
)

_plan: dict[tuple[int, str, int], str] | None = None


def load(path: str | None = None) -> None:
    global _plan
    path = path or os.environ.get("KERNEL_CRASHPLAN")
    if not path:
        _plan = None
        return
    spec = json.loads(Path(path).read_text())
    fired = Path(spec["fired_dir"])
    _plan = {
        (int(t["run"]), t["point"], int(t.get("seq", 0))): str(
            fired / f"{t['run']}-{t['point']}-{t.get('seq', 0)}"
        )
        for t in spec["targets"]
    }


def hit(point: str, *, run: int, seq: int = 0) -> None:
    """SIGKILL this process if the plan says so, once."""
    if _plan is None:
        return
    marker = _plan.get((run, point, seq))
    if marker is None:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return  # fired already, before a restart
    os.fsync(fd)
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


load()
