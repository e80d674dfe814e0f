"""Warm level-2 VMs against real QEMU: a run's commands share one VM, kept by a supervisor
process, through the control plane's own node (its runner's state directory). A boot costs about
ten seconds under TCG, so the module's tests share the run's VM where they can: each boots one
when it finds none, and those that need a fresh one release the run's VM first (pytest-django
runs the database's tests first, so the file's order is not theirs)."""

from __future__ import annotations

import os
import platform
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentos.core import audit
from cluster import nodes, sandbox, warm
from cluster.runner import vm, vmpool
from cluster.runner.handler import Handler
from cluster.runner.protocol import RpcError
from cluster.sandbox import Limits
from missions import killswitch
from tests.cluster.conftest import make_repo
from tests.polling import wait_for

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64",
        reason="level 2 is QEMU on x86-64 Linux",
    ),
    pytest.mark.timeout(300),  # a boot is bounded at 120 s under TCG (cluster/runner/vm.py)
]

BOOT_ID = ["cat", "/proc/sys/kernel/random/boot_id"]


@dataclass
class Warm:
    handler: Handler
    state: Path
    workdir: Path
    run_id: int
    uid: int
    steps: list[str] = field(default_factory=list)

    def profile(self, argv: list[str], **limits: Any) -> dict[str, Any]:
        return sandbox.profile(
            2,
            argv,
            self.workdir,
            Limits(**{"wall_seconds": 60, "memory_bytes": 384 << 20, **limits}),
            None,
            run_id=self.run_id,
        )

    def run(
        self, argv: list[str], *, stopping: threading.Event | None = None, **limits: Any
    ) -> dict[str, Any]:
        step = f"warm-{secrets.token_hex(6)}"  # also the result's key: never answered twice
        self.steps.append(step)
        params = {"step_id": step, "key": step, "fence": 1, "profile": self.profile(argv, **limits)}
        answer: dict[str, Any] = self.handler.call("run", params, stopping=stopping)
        return answer

    def boot_id(self) -> str:
        result = self.run(BOOT_ID)
        assert result["exit_code"] == 0, result
        return str(result["output"].strip())

    def release(self) -> None:
        vmpool.warm_vm(self.state, warm.key(self.run_id)).release()

    def vms(self) -> list[dict[str, Any]]:
        return [entry for entry in vmpool.vms(self.state) if entry["key"] == warm.key(self.run_id)]

    def qemu(self) -> list[int]:
        """The run's QEMU processes on the host."""
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if (
                    entry.name.isdigit()
                    and entry.stat().st_uid == self.uid
                    and (entry / "comm").read_text().startswith("qemu-system")
                ):
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
        return found


@pytest.fixture(scope="module")
def warm_vm(sandbox_base: Path) -> Iterator[Warm]:
    assert vm.available()[0], vm.available()[1]
    run_id = 120_000_000 + 2 * os.getpid()
    parent = Path(tempfile.mkdtemp(prefix="vm-warm-", dir=sandbox_base))
    parent.chmod(0o711)
    repo = make_repo(parent / "repo")
    sandbox.give(repo, run_id)
    state = nodes.local_state()
    found = Warm(Handler(state), state, repo, run_id, sandbox.identity(run_id)[0])
    yield found
    vmpool.release(state, warm.key(run_id))


def test_it_runs_the_next_command_of_the_run_in_the_same_vm(warm_vm: Warm) -> None:
    assert warm_vm.profile(["true"])["warm"] == f"run-{warm_vm.run_id}"
    warm_vm.release()
    first = warm_vm.run(BOOT_ID)
    began = time.monotonic()
    second = warm_vm.run(BOOT_ID)
    answered = time.monotonic() - began

    assert first["exit_code"] == second["exit_code"] == 0, (first, second)
    assert first["output"] == second["output"]  # the guest kernel's boot id: one boot
    assert first["boot_seconds"] > 1
    assert second["boot_seconds"] == 0
    # A boot costs seconds; a warm command its own time and a round trip (the target, 0.5 s, is
    # measured by `manage.py bench_vm` on a quiet machine).
    assert answered - second["guest_seconds"] < 3, (answered, second)
    assert [entry["boot_id"] for entry in warm_vm.vms()] == [first["output"].strip()]


def test_it_shares_the_worktree_both_ways_between_commands(warm_vm: Warm) -> None:
    (warm_vm.workdir / "from-host.txt").write_text("written on the host\n")
    made = warm_vm.run(["sh", "-c", "cat from-host.txt; id -u > from-vm.txt"])
    seen = warm_vm.run(["cat", "from-vm.txt"])

    assert made["output"] == "written on the host\n", made
    assert seen["output"] == f"{warm_vm.uid}\n"
    written = warm_vm.workdir / "from-vm.txt"
    assert written.read_text() == f"{warm_vm.uid}\n"
    assert written.stat().st_uid == warm_vm.uid


def test_it_gives_each_command_its_own_wall_clock_and_a_clean_guest(warm_vm: Warm) -> None:
    booted = warm_vm.boot_id()
    left = warm_vm.run(
        ["sh", "-c", "echo kept > /tmp/left; sleep 300 & echo $!; sleep 300"], wall_seconds=1
    )
    after = warm_vm.run(
        ["sh", "-c", f"ls -A /tmp; kill -0 {left['output'].strip()} || echo gone; cat {BOOT_ID[1]}"]
    )

    assert left["killed"] == "timeout", left
    assert left["exit_code"] is None
    assert left["seconds"] < 1 + 5  # its own clock, not the next command's nor a boot's
    # Nothing of the killed command survives into the next: no process, no /tmp file; same VM.
    assert after["output"].endswith(f"gone\n{booted}\n"), after
    assert "left" not in after["output"]


def test_it_caps_the_output_and_keeps_stderr_and_stdin_apart(warm_vm: Warm) -> None:
    booted = warm_vm.boot_id()
    flood = warm_vm.run(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"], output_bytes=1000)
    # Straight through the node's interface to a run's VM (what other node code uses).
    handle = vmpool.warm_vm(warm_vm.state, warm.key(warm_vm.run_id))
    apart = handle.exec(
        {
            **warm_vm.profile(["sh", "-c", "cat; echo to-err >&2; exit 3"]),
            "stdin": "aW5wdXQK",  # "input\n"
            "stderr_apart": True,
        }
    )

    assert flood["output"] == "x" * 1000
    assert flood["truncated_bytes"] == 299_000
    assert (apart["output"], apart["errors"], apart["exit_code"]) == ("input\n", "to-err\n", 3)
    assert apart["boot_id"] == booted
    booted_vm = handle.booted()
    assert booted_vm is not None
    assert booted_vm["boot_id"] == booted


def test_it_destroys_the_vm_when_a_command_is_cancelled(warm_vm: Warm) -> None:
    (warm_vm.workdir / "started").unlink(missing_ok=True)
    stopping = threading.Event()
    answers: list[dict[str, Any]] = []
    command = threading.Thread(
        target=lambda: answers.append(
            warm_vm.run(["sh", "-c", "touch started; sleep 300"], stopping=stopping)
        )
    )
    command.start()
    wait_for(lambda: (warm_vm.workdir / "started").exists(), timeout=120, message="the command")
    # Another command of the run waits for the VM; stopped meanwhile, it ends at once.
    queued_stop = threading.Event()
    queued_stop.set()
    queued = warm_vm.run(["true"], stopping=queued_stop)
    began = time.monotonic()
    stopping.set()
    command.join(30)

    assert queued["killed"] == "cancelled", queued
    assert command.is_alive() is False
    assert answers, "the cancelled command never answered"
    assert answers[0]["killed"] == "cancelled", answers[0]
    assert time.monotonic() - began < 5
    assert warm_vm.vms() == []
    wait_for(lambda: not warm_vm.qemu(), timeout=10, message="QEMU to go with its supervisor")


def test_a_command_stopped_while_its_vm_boots_leaves_no_vm_booting(warm_vm: Warm) -> None:
    warm_vm.release()
    wait_for(lambda: not warm_vm.qemu(), timeout=10, message="the run's VM to end")
    stopping = threading.Event()
    answers: list[dict[str, Any]] = []
    command = threading.Thread(
        target=lambda: answers.append(warm_vm.run(BOOT_ID, stopping=stopping))
    )
    command.start()
    wait_for(warm_vm.qemu, timeout=60, message="QEMU to start booting")
    stopping.set()
    command.join(30)

    assert answers, "the stopped command never answered"
    assert answers[0]["killed"] == "cancelled", answers[0]
    wait_for(lambda: not warm_vm.qemu(), timeout=10, message="the booting VM to be killed")
    assert warm_vm.vms() == []


def test_it_destroys_the_vm_at_the_run_s_end(db: None, warm_vm: Warm) -> None:
    warm_vm.boot_id()
    assert warm_vm.vms()

    assert warm.release(warm_vm.run_id) == ["local"]

    assert warm_vm.vms() == []
    wait_for(lambda: not warm_vm.qemu(), timeout=10, message="QEMU to end with the run")
    assert warm.release(warm_vm.run_id) == []


def test_the_kill_switch_destroys_the_warm_vm_mid_command(db: None, warm_vm: Warm) -> None:
    (warm_vm.workdir / "started").unlink(missing_ok=True)
    answers: list[dict[str, Any]] = []
    command = threading.Thread(
        target=lambda: answers.append(warm_vm.run(["sh", "-c", "touch started; sleep 300"]))
    )
    command.start()
    wait_for(lambda: (warm_vm.workdir / "started").exists(), timeout=120, message="the command")
    began = time.monotonic()

    stopped = killswitch.engage(actor=audit.Actor())  # through the node's runner, not ours
    command.join(30)

    assert stopped.sandboxes == {"local": [warm_vm.steps[-1]]}
    assert answers, "the command never answered"
    assert answers[0]["killed"] == "cancelled", answers[0]
    assert time.monotonic() - began < 10
    assert warm_vm.vms() == []
    wait_for(lambda: not warm_vm.qemu(), timeout=10, message="QEMU to end at the kill switch")


def test_a_vm_killed_mid_command_is_a_lost_attempt_and_the_next_boots_afresh(
    warm_vm: Warm, monkeypatch: pytest.MonkeyPatch
) -> None:
    booted = warm_vm.boot_id()
    (warm_vm.workdir / "started").unlink(missing_ok=True)
    errors: list[RpcError] = []

    def doomed() -> None:
        try:
            warm_vm.run(["sh", "-c", "touch started; sleep 300"])
        except RpcError as error:
            errors.append(error)

    command = threading.Thread(target=doomed)
    command.start()
    wait_for(lambda: (warm_vm.workdir / "started").exists(), timeout=60, message="the command")
    for pid in warm_vm.qemu():
        os.kill(pid, signal.SIGKILL)
    command.join(30)

    assert errors, "the command of a killed VM answered"
    assert "lost mid-command" in errors[0].message
    # The next command boots a fresh VM; this one ends itself once idle.
    monkeypatch.setenv(vmpool.IDLE_ENV, "2")
    assert warm_vm.boot_id() != booted
    wait_for(lambda: not warm_vm.vms(), timeout=30, message="the idle VM to end itself")
    wait_for(lambda: not warm_vm.qemu(), timeout=10, message="QEMU to end with it")


def test_it_runs_the_command_one_shot_when_no_supervisor_starts(
    warm_vm: Warm, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    warm_vm.release()
    monkeypatch.setattr(vmpool, "ROOT", tmp_path)  # `python -m cluster.runner.vmpool` fails there

    result = warm_vm.run(["sh", "-c", "echo one-shot"])

    assert (result["exit_code"], result["output"]) == (0, "one-shot\n"), result
    assert result["boot_seconds"] > 1
    assert "guest_seconds" not in result  # the one-shot VM's result
    assert warm_vm.vms() == []
    wait_for(lambda: not warm_vm.qemu(), timeout=10, message="the one-shot VM to end")


def test_a_service_outlives_the_commands_that_name_it_and_no_other(warm_vm: Warm) -> None:
    # The service and what it started (the browser's Chromium), as the run's uid with its drops.
    service = {
        "argv": ["sh", "-c", "sleep 600 & echo $! > /tmp/.service/pid; exec sleep 600"],
        "cpu_seconds": 60,
    }
    show = (
        "until [ -s /tmp/.service/pid ]; do sleep 0.1; done; p=$(cat /tmp/.service/pid); echo $p;"
        " grep -E '^(Uid|NoNewPrivs|CapBnd|CapEff):' /proc/$p/status; ls -A /tmp; echo x > /tmp/x"
    )

    def run(argv: list[str], named: bool = True, **limits: Any) -> dict[str, Any]:
        profile = warm_vm.profile(argv, **limits)
        if named:
            profile["service"] = service
        step = f"warm-{secrets.token_hex(6)}"
        params = {"step_id": step, "key": step, "fence": 1, "profile": profile}
        answer: dict[str, Any] = warm_vm.handler.call("run", params)
        return answer

    first = run(["sh", "-c", show])
    second = run(["sh", "-c", show])
    stopped = run(["sleep", "30"], wall_seconds=1)
    third = run(["sh", "-c", show])
    pid = third["output"].split()[0]
    unnamed = run(["sh", "-c", f"kill -0 {pid} 2>/dev/null || echo gone; ls -A /tmp"], named=False)

    assert first["exit_code"] == 0, first
    lines = first["output"].splitlines()
    assert lines[1].split()[1:] == [str(warm_vm.uid)] * 4
    assert "NoNewPrivs:\t1" in lines
    assert "CapBnd:\t0000000000000000" in lines
    assert "CapEff:\t0000000000000000" in lines
    # Kept between commands (its files too), while the commands' own leftovers are not.
    assert second["output"].split()[0] == lines[0]
    assert ".service" in second["output"].splitlines()
    assert "x" not in second["output"].splitlines()
    # A stop takes it along; the next command naming it starts it afresh.
    assert stopped["killed"] == "timeout", stopped
    assert pid != lines[0]
    # A command that does not name it runs without it: nothing of it is left.
    assert unnamed["output"] == "gone\n", unnamed
