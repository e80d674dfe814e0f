"""A push preview costs the worker a bounded amount whatever the worktree holds: hundreds of MB
of a compressible file, a sparse file, one huge line, tens of thousands of files. What is not
shown is said, file by file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from approvals.models import Approval
from kernel import artifacts
from kernel.models import Artifact, Run, Step
from missions.models import Mission
from tests.processes import run_django
from tests.tools.conftest import FINISH, calls
from tools import outgoing
from tools.builtin import CODING_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1 << 20

# Inside the sandbox: 300 MB of zeros, a 1000 MB sparse file (the sandbox's per-file limit is
# 1 GB), 50 MB on one line, 20,000 small files whose diff alone is past the kept cap, and one
# of each other type.
BOMBS = """
import os
with open("zeros.bin", "wb") as f:
    for _ in range(300):
        f.write(bytes(1 << 20))
with open("sparse.bin", "wb") as f:
    f.truncate(1000 << 20)
with open("oneline.txt", "w") as f:
    for _ in range(50):
        f.write("x" * (1 << 20))
os.mkdir("many")
for n in range(20000):
    with open(f"many/f{n:05}", "w") as f:
        f.write(f"{n:0499}\\n")
os.symlink("zeros.bin", "a-link")
with open("a-run.sh", "w") as f:
    f.write("#!/bin/sh\\n")
os.chmod("a-run.sh", 0o755)
print("planted")
"""

# In a fresh worker process: a small run first (every module the worker loads is loaded), then
# the bombs; the peak resident size before and after, in KiB.
MEASURE = """
import json, resource
from kernel import runs
from kernel.worker import Worker
from missions.models import Mission

spec = json.loads({spec!r})
mission = Mission.objects.get(pk=spec["mission"])

def play(turns):
    given = {{**spec["input"], "script": {{"turns": turns}}}}
    run = runs.start_run(account=mission, program="agent", input=given)
    Worker(lease_seconds=120).run_until_idle()
    return run.pk

play(spec["warmup"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run = play(spec["bombs"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"run": run, "before": before, "after": after}}))
"""


def turns(command: str, message: str) -> list[dict[str, Any]]:
    return [
        calls(("shell", {"command": command})),
        calls(("git_commit", {"message": message})),
        calls(("git_push", {"remote": "origin", "branch": "main"})),
        FINISH,
    ]


@pytest.mark.timeout(660)  # measured 41 s; its measuring process has its own 600 s bound
def test_a_preview_of_bombs_is_bounded_in_memory_and_time_and_says_what_is_not_shown(
    hostile_mission: tuple[Mission, Path],
) -> None:
    mission, repo = hostile_mission
    spec = {
        "mission": mission.pk,
        "input": {
            "goal": "Do as told.",
            "provider": "scripted",
            "model": "scripted",
            "tools": CODING_TOOLS,
            "repository": str(repo),
        },
        "warmup": turns("echo small > small.txt", "small"),
        "bombs": turns(f"python3 -c '{BOMBS}'", "bombs"),
    }
    done = run_django(MEASURE.format(spec=json.dumps(spec)), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    run = Run.objects.get(pk=measured["run"])
    assert run.status == "waiting", run.error
    approval = Approval.objects.get(run=run)
    preview = approval.request["preview"]

    # The worker: tens of MB at most, whatever the worktree holds (it was +900 MB).
    grown = (measured["after"] - measured["before"]) * 1024
    assert grown < 64 * MB, f"the worker grew by {grown / MB:.0f} MB"
    step = Step.objects.get(run=run, name="approval-request:git_push")
    assert step.finished_at is not None
    seconds = (step.finished_at - step.started_at).total_seconds()
    assert seconds < 60, f"the preview took {seconds:.0f} s"

    # What is not shown comes first, with its size, type and why.
    assert preview["files_total"] == 20000 + 5
    assert preview["files_not_shown"] == 3
    listed = {entry["path"]: entry for entry in preview["files"]}
    assert [entry["path"] for entry in preview["files"][:3]] == [
        "oneline.txt",
        "sparse.bin",
        "zeros.bin",
    ]
    for path, size in (
        ("oneline.txt", 50 * MB),
        ("sparse.bin", 1000 * MB),
        ("zeros.bin", 300 * MB),
    ):
        assert listed[path] == {
            "path": path,
            "status": "A",
            "size": size,
            "type": "file",
            "shown": False,
            "reason": f"over {outgoing.MAX_FILE_BYTES // MB} MB: not diffed",
        }
    assert listed["a-link"]["type"] == "symlink"
    assert listed["a-run.sh"]["type"] == "executable"
    assert listed["many/f00000"] == {
        "path": "many/f00000",
        "status": "A",
        "size": 500,
        "type": "file",
        "shown": True,
    }
    assert len(preview["files"]) == 500
    # The diff: cut for the page, and the kept one cut too, said so.
    assert preview["diff_truncated"] is True
    assert preview["full_diff_cut"] is True
    assert preview["diff_chars"] <= outgoing.FULL_DIFF_BYTES
    full = Artifact.objects.get(sha256=preview["full_diff"])
    assert full.name.endswith("-cut.diff")
    with artifacts.open_artifact(full) as handle:
        text = handle.read()
    assert len(text) <= outgoing.FULL_DIFF_BYTES
    assert b"+++ b/many/f00000" in text
    assert b"xxxxxxxx" not in text
    assert b"oneline.txt" not in text
