"""The chaos case of the node runners: shell steps on SSH test nodes whose runner processes are
SIGKILLed mid-step (its lab is `missions.proving.chaos`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from django.db import connection

from cluster import nodes
from cluster.models import Node, Placement
from cluster.proving import testhosts
from kernel.models import RunStatus
from kernel.proving.chaos import Report
from missions.proving.chaos import FINISH, RUN_SECONDS, calls, lab

# Each shell step sleeps this long after its write: time to be killed, and for the killer to see
# its last victim's node back before the next step is done.
NODE_STEP_SECONDS = 2.5


def node_runner_case(*, say: Callable[[str], None] = print, quick: bool = False) -> Report:
    """A coding run whose shell steps run on three SSH nodes (network namespaces, each with its
    own sshd and runner; the control plane's own node disabled). While a step sleeps after its
    write, the runner process serving it on its node is SIGKILLed (sshd lives on): the step is
    placed again on another node under a higher fence, after the worktree is put back to the
    step's checkpoint. Its node, marked lost, is asked again and rejoins.
    Checked: the run ends done, every append is in the log exactly once, each killed step has one
    lost attempt and one done, and every step is answered by a node."""
    wanted = 2 if quick else 12
    # Names of their own: the nodes stay registered (disabled) with the placements they took.
    names = [f"chaos-{uuid.uuid4().hex[:6]}-{number}" for number in (1, 2, 3)]
    with lab("node runner", say) as case:
        hosts = testhosts.start(
            names=names,
            base=case.data / "nodes",
            public_key_line=nodes.public_key_line(),
        )
        local = nodes.local_node()
        try:
            for host in hosts.nodes:
                nodes.add_node(
                    name=host.name, address=host.node_ip, port=host.port, host_key=host.host_key
                )
            nodes.set_enabled(node=local, enabled=False)
            count = wanted + 4  # a step may still end unseen while the killer waits on a node
            appends = [
                ("shell", {"command": f"echo {index} >> log.txt; sleep {NODE_STEP_SECONDS}"})
                for index in range(count)
            ]
            # Two steps a turn: 8 turns in a row without a ledger change would be a stall the
            # owner is asked about.
            script = [calls(*appends[index : index + 2]) for index in range(0, count, 2)]
            run = case.start([*script, FINISH])
            killer = _RunnerKiller(hosts, wanted)
            killer.start()
            try:
                # Each step's sleep, and for each kill a node lost, asked again and a second
                # attempt: the run's own deadline grows with them.
                seconds = RUN_SECONDS + count * NODE_STEP_SECONDS + wanted * 10
                run = case.finish(run, case.worker(), seconds=seconds)
            finally:
                killer.stop()
            case.report.kills += len(killer.killed)
            case.expect(killer.error is None, f"the killer failed: {killer.error}")
            case.expect(
                run.status == RunStatus.DONE, f"run {run.pk} ended {run.status}: {run.error}"
            )
            log = Path(run.workspace) / "log.txt" if run.workspace else None
            lines = log.read_text() if log is not None and log.exists() else ""
            expected = "".join(f"{index}\n" for index in range(count))
            case.expect(lines == expected, f"the log holds {lines!r}, not each append once")
            case.expect(
                len(killer.killed) == wanted,
                f"{len(killer.killed)} runners killed mid-step, not {wanted}",
            )
            attempts: dict[str, list[str]] = {}
            for attempt in Placement.objects.filter(step_id__startswith=f"run-{run.pk}-"):
                attempts.setdefault(attempt.step_id, []).append(attempt.status)
            for step_id, statuses in attempts.items():
                done = statuses.count(Placement.Status.DONE)
                case.expect(done == 1, f"step {step_id} was answered {done} times: {statuses}")
                lost = statuses.count(Placement.Status.LOST)
                case.expect(
                    lost == (1 if step_id in killer.killed else 0),
                    f"step {step_id}: {lost} lost attempts, killed: {step_id in killer.killed}",
                )
            case.expect(len(attempts) == count, f"{len(attempts)} shell steps placed of {count}")
        finally:
            hosts.stop()
            nodes.close_all()
            Node.objects.filter(name__in=names).update(enabled=False)
            nodes.set_enabled(node=local, enabled=True)
    return case.report


class _RunnerKiller:
    """Watches the test nodes' live sandboxes; kills the runner serving each of the first
    `wanted` steps seen (once per step), then brings its node back."""

    def __init__(self, hosts: testhosts.TestHosts, wanted: int) -> None:
        self.hosts = hosts
        self.wanted = wanted
        self.killed: list[str] = []
        self.error: str | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="runner-killer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)

    def _loop(self) -> None:
        try:
            while not self.stopping.wait(0.05) and len(self.killed) < self.wanted:
                # Checked before each kill, not once a sweep: a turn's two steps may run at once
                # on two nodes, and one sweep would kill both when one was left to kill.
                for host in self.hosts.nodes:
                    for active in sorted((host.state / "active").glob("*.json")):
                        step = _active_step(active)
                        if len(self.killed) >= self.wanted:
                            return
                        if step and step not in self.killed and step.startswith("run-"):
                            self._kill(host, step)
        except Exception as error:  # reported as a violation by the case
            self.error = repr(error)
        finally:
            connection.close()

    def _kill(self, host: testhosts.TestNode, step: str) -> None:
        pids = _runner_pids(host.name)
        if not pids:
            return  # between two steps: try again
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.killed.append(step)
        # The worker's dispatch marks the node lost when the channel closes; then it is asked
        # again (its sshd lives) and rejoins: later steps may land on it.
        deadline = time.monotonic() + 30
        node = Node.objects.get(name=host.name)
        while node.status != Node.Status.LOST:
            if self.stopping.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.05)
            node.refresh_from_db()
        nodes.hello(node)


def _active_step(path: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError):
        found = json.loads(path.read_text())
        return str(found.get("step_id")) if isinstance(found, dict) else None
    return None


def _runner_pids(node: str) -> list[int]:
    """The runner processes serving node `node` (`python3 -m cluster.runner ... --node NAME`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"cluster.runner" in argv and node.encode() in argv and b"--node" in argv:
            pids.append(int(entry.name))
    return pids
