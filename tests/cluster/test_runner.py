"""The node runner (`cluster.runner`): the real runner process over stdio, its in-process handler,
real bwrap sandboxes; fencing, result files, the kill switch across processes, install, and
environments."""

from __future__ import annotations

import base64
import itertools
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import sandbox
from cluster.dispatch import StepRef
from cluster.runner import deploy
from cluster.runner.handler import DIE_AFTER_RESULT_ENV, Handler
from cluster.sandbox import Limits
from tests.cluster.helpers import marker, processes_with
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="level 1 is Linux bubblewrap")

ROOT = Path(__file__).resolve().parents[2]
QUICK = Limits(wall_seconds=20)


class Runner:
    """`python3 -m cluster.runner` as a node's sshd starts it: JSON lines on its stdin/stdout."""

    def __init__(
        self, state: Path, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cluster.runner", "--state", str(state), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            env={**os.environ, **(env or {})},
        )
        self.ids = itertools.count(1)

    def send(self, method: str, params: dict[str, Any] | None = None) -> None:
        assert self.process.stdin is not None
        request = {"jsonrpc": "2.0", "id": next(self.ids), "method": method}
        if params is not None:
            request["params"] = params
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()

    def receive(self, timeout: float = 30) -> dict[str, Any]:
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as waiting:
            waiting.register(self.process.stdout, selectors.EVENT_READ)
            assert waiting.select(timeout), "the runner did not answer in time"
        line = self.process.stdout.readline()
        assert line, f"the runner closed its output (exit code {self.process.poll()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.send(method, params)
        answer = self.receive()
        assert "result" in answer, answer
        return answer["result"]

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture(scope="module")
def state(sandbox_base: Path) -> Iterator[Path]:
    """One node state directory for the module (steps and keys are unique per test)."""
    path = Path(tempfile.mkdtemp(prefix="node-", dir=sandbox_base))
    path.chmod(0o711)
    yield path / "state"
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def runners(state: Path) -> Iterator[list[Runner]]:
    """Runner processes started by a test, closed (and killed if need be) after it."""
    started: list[Runner] = []
    yield started
    for runner in started:
        runner.close()


def start(runners: list[Runner], state: Path, *args: str, **kwargs: Any) -> Runner:
    runner = Runner(state, "--node", "test-node", *args, **kwargs)
    runners.append(runner)
    return runner


def profile(script: str, workdir: Path | None, limits: Limits = QUICK) -> dict[str, Any]:
    return sandbox.profile(1, ["/bin/sh", "-c", script], workdir, limits, sandbox._ready())


def step(
    profile: dict[str, Any], *, fence: int = 1, key: str = "", sid: str = ""
) -> dict[str, Any]:
    return {
        "step_id": sid or f"s-{secrets.token_hex(6)}",
        "key": key or secrets.token_hex(8),
        "fence": fence,
        "profile": profile,
    }


def test_it_runs_a_command_in_bwrap_over_stdio(
    state: Path, runners: list[Runner], workdir: Path
) -> None:
    runner = start(runners, state)

    hello = runner.call("hello", {})
    ran = runner.call("run", step(profile("echo hi; pwd; id -u; ls /", workdir)))

    assert hello["protocol"] == 1
    assert hello["node"] == "test-node"
    assert hello["runner_version"].startswith("dev-")
    assert {"level": 1, "available": True, "why": ""} in hello["levels"]
    assert {"collected_at", "load1", "cpus", "mem_total", "mem_available", "disk_free"} <= set(
        hello["telemetry"]
    )
    lines = ran["output"].splitlines()
    assert lines[:3] == ["hi", "/workspace", str(sandbox.identity()[0])], ran
    assert "root" not in lines[3:]  # only what the sandbox mounts
    assert "home" not in lines[3:]
    assert ran["exit_code"] == 0
    assert ran["killed"] is None
    assert ran["replayed"] is False
    assert ran["runner_version"] == hello["runner_version"]
    assert ran["environment"] is None


def test_it_runs_a_key_once_whoever_asks(state: Path, runners: list[Runner], workdir: Path) -> None:
    request = step(profile("echo ran >> count; wc -l < count", workdir))

    first = start(runners, state).call("run", request)
    again = start(runners, state).call("run", {**request, "fence": 2})
    in_process = Handler(state, "test-node").call("run", {**request, "fence": 2})
    asked = Handler(state).call("result", {"key": request["key"]})

    assert (workdir / "count").read_text() == "ran\n"
    assert first["output"] == "1\n"
    assert first["replayed"] is False
    for answer in (again, in_process, asked):
        assert {**answer, "replayed": False} == first
        assert answer["replayed"] is True
    assert Handler(state).call("result", {"key": "never-ran"}) is None


def test_it_refuses_a_stale_fence(state: Path, runners: list[Runner], workdir: Path) -> None:
    runner = start(runners, state)
    request = step(profile("echo ran >> fenced", workdir), fence=5, sid="fenced-step")
    runner.call("run", request)

    runner.send("run", {**request, "fence": 4, "key": "another-attempt"})
    refused = runner.receive()

    assert refused["error"] == {
        "code": -32010,
        "message": "stale fence 4 for step fenced-step: fence 5 already accepted",
    }
    assert (workdir / "fenced").read_text() == "ran\n"


def test_it_answers_from_its_result_file_after_dying_before_the_answer(
    state: Path, runners: list[Runner], workdir: Path
) -> None:
    request = step(profile("echo ran >> died", workdir))
    dying = start(runners, state, env={DIE_AFTER_RESULT_ENV: "1"})

    dying.send("run", request)
    assert dying.process.wait(30) == -signal.SIGKILL
    retried = start(runners, state).call("run", {**request, "fence": 2})

    assert (workdir / "died").read_text() == "ran\n"
    assert retried["replayed"] is True
    assert retried["exit_code"] == 0


def test_it_stops_a_sandbox_of_another_runner_process(
    state: Path, runners: list[Runner], workdir: Path
) -> None:
    sleep = marker()
    owner, other = start(runners, state), start(runners, state)
    request = step(profile(f"sleep {sleep}", workdir), sid=f"stop-{secrets.token_hex(4)}")

    owner.send("run", request)
    wait_for(
        lambda: processes_with(sleep), timeout=20, message="the sandbox to start", interval=0.05
    )
    listed = other.call("sandboxes", {})
    began = time.monotonic()
    stopped = other.call("stop_all", {})
    answer = owner.receive()["result"]

    assert [entry["step_id"] for entry in listed] == [request["step_id"]]
    assert stopped == {"stopped": [request["step_id"]], "warm_vms": []}
    assert answer["killed"] == "cancelled"
    assert answer["exit_code"] is None
    assert time.monotonic() - began < 5
    assert processes_with(sleep) == []
    assert other.call("sandboxes", {}) == []


def test_it_kills_the_sandbox_when_its_caller_hangs_up(
    state: Path, runners: list[Runner], workdir: Path
) -> None:
    sleep = marker()
    runner = start(runners, state)
    runner.send("run", step(profile(f"sleep {sleep}", workdir)))
    wait_for(
        lambda: processes_with(sleep), timeout=20, message="the sandbox to start", interval=0.05
    )

    assert runner.process.stdin is not None
    runner.process.stdin.close()  # the SSH connection is gone

    assert runner.process.wait(10) == 0
    assert processes_with(sleep) == []


def test_it_cancels_one_step_in_process(state: Path, workdir: Path) -> None:
    node = Handler(state)
    request = step(profile("sleep 30", workdir))
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(node.call("run", request)))
    thread.start()
    wait_for(
        lambda: node.call("sandboxes", {}),
        timeout=20,
        message="the sandbox to start",
        interval=0.05,
    )

    cancelled = node.call("cancel", {"step_id": request["step_id"]})
    thread.join(10)

    assert cancelled == {"cancelled": True}
    assert answers[0]["killed"] == "cancelled"
    assert node.call("cancel", {"step_id": request["step_id"]}) == {"cancelled": False}


@pytest.mark.django_db
def test_it_runs_a_step_through_the_sandbox_once(workdir: Path) -> None:
    ref = StepRef(f"tool-{secrets.token_hex(4)}", secrets.token_hex(8), 1)
    box = sandbox.for_level(1)

    first = box.run(["sh", "-c", "echo ran >> once; cat once"], workdir=workdir, step=ref)
    second = box.run(["sh", "-c", "echo ran >> once; cat once"], workdir=workdir, step=ref)

    assert first == second
    assert first.output == "ran\n"
    assert (workdir / "once").read_text() == "ran\n"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "step_id must match"),
        ({"step_id": "a", "key": "k", "fence": -1, "profile": {}}, "fence must be an integer"),
        ({"step_id": "a", "key": "k", "fence": 1, "profile": []}, "profile must be an object"),
        (
            {"step_id": "a", "key": "k", "fence": 1, "profile": {"level": 1, "argv": []}},
            "profile.argv must be a non-empty list of strings",
        ),
        ({"step_id": "../etc", "key": "k", "fence": 1, "profile": {}}, "step_id must match"),
    ],
)
def test_it_names_the_bad_field(state: Path, params: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception, match=message) as raised:
        Handler(state).call("run", params)
    assert getattr(raised.value, "code", None) == -32602


def test_it_says_level_three_is_unavailable(state: Path, workdir: Path) -> None:
    built = {**profile("true", workdir), "level": 3}
    with pytest.raises(Exception, match=r"^level 3 unavailable: ") as raised:
        Handler(state).call("run", step(built))
    assert getattr(raised.value, "code", None) == -32011


# --- Install -------------------------------------------------------------------------------------


def request(version: str, tree: dict[str, bytes], digest: str | None = None) -> dict[str, Any]:
    return {
        "version": version,
        "files": {path: base64.b64encode(content).decode() for path, content in tree.items()},
        "digest": digest or deploy.tree_digest(tree),
    }


def test_it_installs_a_runner_atomically_and_refuses_a_bad_one(
    state: Path, runners: list[Runner], sandbox_base: Path
) -> None:
    root = Path(tempfile.mkdtemp(prefix="root-", dir=sandbox_base))
    node = Handler(state, "test-node", root)
    tree = deploy.source_files()
    current = root / "runner" / "current"

    first = node.call("install", request("v1", tree))
    bad = {
        "bad digest": request("v2", tree, "0" * 64),
        "syntax": request("v2", {**tree, "cluster/runner/protocol.py": b"def (:\n"}),
        "self-test": request(
            "v2", {**tree, "cluster/runner/protocol.py": b"raise SystemExit(3)\n"}
        ),
        "outside": request("v2", {**tree, "cluster/evil.py": b""}),
    }
    refusals = {}
    for name, params in bad.items():
        with pytest.raises(Exception) as raised:  # noqa: PT011 (the message is checked below)
            node.call("install", params)
        refusals[name] = (getattr(raised.value, "code", None), str(raised.value))
        assert current.readlink() == Path("versions/v1"), name
    second = node.call("install", request("v2", tree))
    # As a node's sshd starts it: from the current version's directory.
    deployed = start(runners, state, cwd=current).call("hello", {})

    assert first == {"previous": None, "current": "v1"}
    assert second == {"previous": "v1", "current": "v2"}
    assert refusals["bad digest"][1].startswith("digest mismatch: the files hash to")
    assert "cluster/runner/protocol.py does not compile" in refusals["syntax"][1]
    assert "self-test failed (exit code 3)" in refusals["self-test"][1]
    assert "is not a path under cluster/runner/" in refusals["outside"][1]
    assert {code for code, _ in refusals.values()} == {-32602}
    assert sorted(path.name for path in (root / "runner" / "versions").iterdir()) == ["v1", "v2"]
    assert deployed["runner_version"] == "v2"


def test_it_runs_the_deployed_runner_alone(sandbox_base: Path) -> None:
    """The deployed tree, with nothing of the project on the path (-I), passes its self-test:
    the runner imports only the standard library."""
    home = Path(tempfile.mkdtemp(prefix="alone-", dir=sandbox_base))
    try:
        for path, content in deploy.source_files().items():
            (home / path).parent.mkdir(parents=True, exist_ok=True)
            (home / path).write_bytes(content)
        checked = subprocess.run(
            [sys.executable, "-I", "-c", deploy.BOOT, str(home), "--self-test"],
            capture_output=True,
            text=True,
            cwd=home,
            env={"PATH": os.environ["PATH"]},
            check=False,
        )
    finally:
        shutil.rmtree(home)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("ok dev-")


# --- Environments --------------------------------------------------------------------------------

SETUP = """\
set -e
echo built >> builds
mkdir -p /env/bin
printf '#!/bin/sh\\necho from the environment\\n' > /env/bin/hello-env
chmod 700 /env/bin/hello-env
"""


def test_it_builds_an_environment_once_and_mounts_it_read_only(
    state: Path, runners: list[Runner], workdir: Path
) -> None:
    name = f"tools-{secrets.token_hex(3)}"
    build = {"name": name, "version": "1", "profile": profile(SETUP, workdir)}
    runner = start(runners, state)

    built = runner.call("build_environment", build)
    again = runner.call("build_environment", build)
    listed = runner.call("environments", {})
    used = profile(
        'hello-env; echo "$PATH"; touch /env/new 2>&1; echo x > /env/bin/hello-env 2>&1; true',
        workdir,
    )
    used["environment"] = {"name": name, "version": "1"}
    ran = runner.call("run", step(used))
    runner.send("run", step({**used, "environment": {"name": name, "version": "2"}}))
    missing = runner.receive()

    assert (workdir / "builds").read_text() == "built\n"
    assert again == built
    assert built["name"] == name
    assert len(built["digest"]) == 64
    assert built in listed
    lines = ran["output"].splitlines()
    assert lines[0] == "from the environment"
    assert lines[1].startswith("/env/bin:")
    assert "Read-only file system" in lines[2]
    assert "Read-only file system" in lines[3]
    assert ran["environment"] == f"{name}@1"
    frozen = state / "environments" / name / "1"
    assert (frozen / "bin" / "hello-env").stat().st_mode & 0o777 == 0o555
    if os.geteuid() == 0:
        assert (frozen / "bin" / "hello-env").stat().st_uid == 0
    assert missing["error"]["code"] == -32602
    assert f"{name}@2 is not built on this node" in missing["error"]["message"]
