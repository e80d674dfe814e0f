"""Where the runner hands a level-2 profile: the run's warm VM (`vmpool`), else a one-shot VM
(`vm`). Both modules are loaded only once found: a runner tree without them still serves levels
0 and 1, and says why it has no level 2."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster.runner.protocol import unavailable


def available() -> tuple[bool, str]:
    if importlib.util.find_spec("cluster.runner.vm") is None:
        return False, "level 2 unavailable: this runner has no VM support (cluster/runner/vm.py)"
    from cluster.runner import vm

    found: tuple[bool, str] = vm.available()
    return found


def _check() -> None:
    ok, why = available()
    if not ok:
        raise unavailable(why if why.startswith("level 2") else f"level 2 unavailable: {why}")


def run_one_shot(profile: dict[str, Any], state: Path, stop: threading.Event) -> dict[str, Any]:
    """A VM of its own for this command (`cluster/runner/vm.py`), gone when it ends."""
    _check()
    from cluster.runner import vm  # found by `_check` above

    result: dict[str, Any] = vm.run_vm(profile, state_dir=state, stopping=stop)
    for key, default in (("errors", ""), ("reason", ""), ("out_of_memory", 0)):
        result.setdefault(key, default)
    return result


def run_warm(
    profile: dict[str, Any],
    state: Path,
    stop: threading.Event,
    started: Callable[[int, list[Path]], None],
) -> dict[str, Any]:
    """The command in the run's warm VM (`cluster/runner/vmpool.py`); one-shot when the warm
    path cannot start at all. The supervisor's process group stands for the sandbox in
    `active/`: a cancel from any runner process kills it, and the VM with it."""
    _check()
    from cluster.runner import vmpool  # found by `_check` above

    try:
        result: dict[str, Any] = vmpool.run_profile(
            profile, state=state, stopping=stop, started=lambda pid: started(pid, [])
        )
    except vmpool.WarmUnavailable:
        return run_one_shot(profile, state, stop)
    return result


def warm_call(what: str, state: Path, *args: str) -> Any:
    """`vmpool.stop_all` or `vmpool.release`, on a runner with level 2 (else nothing to do)."""
    if importlib.util.find_spec("cluster.runner.vmpool") is None:
        return []
    from cluster.runner import vmpool

    return getattr(vmpool, what)(state, *args)
