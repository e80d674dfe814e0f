"""The kill switch reaches the sandboxes: a sandbox started by another runner process on the
control plane's own node (as a worker's step starts one) is killed, named in what the owner is
told, and its egress tokens die with it. The SSH nodes' side is in test_nodes."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from agentos.core import audit
from cluster import nodes, run_tokens, sandbox
from cluster.sandbox import Limits
from missions import killswitch
from tests.polling import wait_for


def runner_process() -> subprocess.Popen[bytes]:
    """A runner of the local node in a process of its own, as a worker's would be."""
    state = str(nodes.local_state())
    return subprocess.Popen(
        [sys.executable, "-m", "cluster.runner", "--state", state, "--node", "local"],
        cwd=settings.BASE_DIR,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def sleeping(process: subprocess.Popen[bytes], workdir: Path) -> str:
    step = f"step-{secrets.token_hex(5)}"
    params: dict[str, Any] = {
        "step_id": step,
        "key": secrets.token_hex(8),
        "fence": 1,
        "profile": sandbox.profile(
            1,
            ["/bin/sh", "-c", "touch started; sleep 120"],
            workdir,
            Limits(wall_seconds=180),
            sandbox._ready(),
        ),
    }
    assert process.stdin is not None
    process.stdin.write(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "run", "params": params}).encode() + b"\n"
    )
    process.stdin.flush()
    wait_for(lambda: (workdir / "started").exists(), timeout=30, message="the sandbox to start")
    return step


def test_it_kills_a_sandbox_another_process_started_and_says_so(db: None, workdir: Path) -> None:
    process = runner_process()
    try:
        step = sleeping(process, workdir)
        generation = run_tokens.revoke_all()
        began = time.monotonic()

        stopped = killswitch.engage(actor=audit.Actor())

        assert stopped.sandboxes == {"local": [step]}
        assert stopped.unreachable == {}
        assert stopped.tokens_revoked is True
        assert run_tokens.revoke_all() == generation + 2  # the switch revoked once more
        assert process.stdout is not None
        answer = json.loads(process.stdout.readline())
        assert answer["result"]["killed"] == "cancelled"
        assert time.monotonic() - began < 30  # not the command's 120 s
    finally:
        process.kill()
        process.wait(timeout=10)


def test_the_command_stops_nothing_without_yes(db: None) -> None:
    with pytest.raises(CommandError, match="Nothing was stopped: run it again with --yes"):
        call_command("kill_switch")


def test_the_command_says_what_it_stopped(db: None, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("kill_switch", "--yes")

    out = capsys.readouterr().out
    assert "Stopped 0 runs: -" in out
    assert "Revoked every sandbox's egress token." in out
    assert "Node local: killed 0 sandboxes -" in out
