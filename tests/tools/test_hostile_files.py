"""A hostile model against the file tools and the shell: FIFOs, links into protected paths,
protected files written by shell commands. Each attempt is refused or undone, within seconds, and
the model is told."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cluster.sandbox import identity
from kernel import runs
from kernel.context import StepCall
from kernel.journal import Fence
from kernel.models import Run
from kernel.worker import Worker
from missions.models import Mission
from tests.polling import wait_for
from tests.tools.conftest import FINISH, AgentRun, calls, outputs
from tests.tools.worktrees import DEADLINE, commit, within
from tools import files
from tools.base import ToolEnv, text_of
from tools.builtin import CODING_TOOLS
from tools.files import LIST_FILES

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_fifo_is_refused_by_every_file_tool_without_blocking(hostile: AgentRun) -> None:
    run = within(
        DEADLINE,
        lambda: hostile(
            [
                calls(("shell", {"command": "mkfifo notes.txt && mkdir d && mkfifo d/pipe"})),
                calls(
                    ("read_file", {"path": "notes.txt"}),
                    ("list_files", {"path": "."}),
                    ("search", {"pattern": "x", "path": "notes.txt"}),
                    ("read_file", {"path": "d/pipe"}),
                ),
                calls(("write_file", {"path": "notes.txt", "content": "x"})),
                calls(("edit_file", {"path": "notes.txt", "old_text": "a", "new_text": "b"})),
                FINISH,
            ]
        ),
    )
    assert run.status == "done", run.error
    read, listing, search, nested = outputs(run)[1:5]
    assert read["is_error"]
    assert "notes.txt: a named pipe (FIFO), not a regular file; refused." in read["output"]
    assert not listing["is_error"]
    assert "notes.txt" in listing["output"].splitlines()  # listed, never opened
    assert search["is_error"]
    assert "a named pipe (FIFO); nothing to search" in search["output"]
    assert nested["is_error"]
    (write,) = outputs(run, "write_file")
    assert write["is_error"]
    assert "a named pipe (FIFO), not a regular file" in write["output"]
    (edit,) = outputs(run, "edit_file")
    assert edit["is_error"]
    assert "a named pipe (FIFO), not a regular file" in edit["output"]
    assert stat.S_ISFIFO((Path(run.workspace) / "notes.txt").lstat().st_mode)


def test_a_search_blocked_on_a_fifo_is_stopped_within_seconds(
    hostile_mission: tuple[Mission, Path],
) -> None:
    """ripgrep opens `.ignore` files as it walks: a FIFO there blocks it (in the sandbox)."""
    mission, repo = hostile_mission
    run = runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": "Search.",
            "provider": "scripted",
            "model": "scripted",
            "tools": CODING_TOOLS,
            "script": {
                "turns": [
                    calls(("shell", {"command": "mkfifo .ignore"})),
                    calls(("search", {"pattern": "average"})),
                    FINISH,
                ]
            },
            "repository": str(repo),
        },
    )
    worker = threading.Thread(target=Worker(lease_seconds=2).run_until_idle, daemon=True)
    worker.start()

    def searching() -> bool:
        assert worker.is_alive(), "the run ended without searching"
        return _rg_running(run.pk)

    wait_for(searching, timeout=60, message="the search to start", interval=0.05)
    time.sleep(0.5)  # blocked on the FIFO by now
    asked = time.monotonic()
    runs.request_stop(run.pk)
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert time.monotonic() - asked < 5
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    assert not _rg_running(run.pk)


def _rg_running(run_id: int) -> bool:
    uid = str(identity(run_id)[0])
    found = subprocess.run(["pgrep", "-u", uid, "-x", "rg"], capture_output=True, check=False)
    return bool(found.stdout.strip())


def test_links_into_protected_paths_are_refused_when_judged_and_when_written(
    hostile: AgentRun, hostile_mission: tuple[Mission, Path]
) -> None:
    _, repo = hostile_mission
    commit(repo, {".envrc": "export SAFE=1\n"})
    run = hostile(
        [
            calls(("shell", {"command": "ln -s .githooks hooks && ln -s .envrc env"})),
            # Judged when the model answers, on the paths the links resolve to.
            calls(
                ("write_file", {"path": "hooks/pre-commit", "content": "#!/bin/sh\nid\n"}),
                ("read_file", {"path": "env"}),
            ),
            calls(("edit_file", {"path": "env", "old_text": "SAFE=1", "new_text": "PWNED=1"})),
            # The link is made in the same turn: judged before it existed, refused when written.
            calls(
                ("shell", {"command": "ln -s .github gh"}),
                ("write_file", {"path": "gh/workflows/x.yml", "content": "on: push\n"}),
            ),
            calls(
                ("shell", {"command": "ln -s /workspace/.envrc abs"}),
                ("edit_file", {"path": "abs", "old_text": "SAFE=1", "new_text": "PWNED=1"}),
            ),
            FINISH,
        ]
    )
    assert run.status == "done", run.error
    judged, late_write = outputs(run, "write_file")
    assert judged["permission"]["decision"] == "deny"
    assert ".githooks/ is protected" in judged["output"]
    assert "hooks/pre-commit leads to .githooks/pre-commit" in judged["output"]
    assert late_write["is_error"]
    assert "permission" not in late_write  # allowed when judged: the tool refused it itself
    assert ".github/ is protected" in late_write["output"]
    edit, late_edit = outputs(run, "edit_file")
    assert edit["permission"]["decision"] == "deny"
    assert ".envrc is protected" in edit["output"]
    assert late_edit["is_error"]
    assert ".envrc is protected" in late_edit["output"]
    worktree = Path(run.workspace)
    assert (worktree / ".envrc").read_text() == "export SAFE=1\n"
    assert not (worktree / ".githooks").exists()
    assert not (worktree / ".github").exists()


def test_a_directory_swapped_for_a_link_does_not_lead_out(hostile: AgentRun) -> None:
    run = hostile(
        [
            calls(("write_file", {"path": "sub/a.txt", "content": "one\n"})),
            calls(("shell", {"command": "rm -rf sub && ln -s /etc sub"})),
            calls(
                ("read_file", {"path": "sub/passwd"}),
                ("list_files", {"path": "sub"}),
            ),
            calls(("write_file", {"path": "sub/a.txt", "content": "two\n"})),
            FINISH,
        ]
    )
    assert run.status == "done", run.error
    read, listing = outputs(run)[2:4]
    assert "through a symbolic link" in read["output"]
    assert listing["is_error"]
    (_, write) = outputs(run, "write_file")
    assert write["is_error"]
    assert "through a symbolic link" in write["output"]
    assert not Path("/etc/a.txt").exists()


def test_files_the_harness_writes_belong_to_the_sandbox(hostile: AgentRun) -> None:
    run = hostile(
        [
            calls(("write_file", {"path": "deep/er/new.txt", "content": "x\n"})),
            calls(("shell", {"command": "echo more >> deep/er/new.txt && touch deep/er/b"})),
            FINISH,
        ]
    )
    (shell,) = outputs(run, "shell")
    assert "[exit code 0]" in shell["output"], shell
    assert (Path(run.workspace) / "deep/er/new.txt").read_text() == "x\nmore\n"


def list_env(top: Path, stopping: threading.Event) -> ToolEnv:
    call = StepCall(1, 1, "k", {}, False, stopping, Fence(1, 1))
    return ToolEnv(call, 1, None, top)


def test_a_listing_answers_a_stop_and_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(50):
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}" / "f.txt").write_text("x")
    os.mkfifo(tmp_path / "d0" / "pipe")
    (tmp_path / "d1" / "out").symlink_to("/etc")

    whole = text_of(LIST_FILES.run(list_env(tmp_path, threading.Event()), {"path": "."}))
    assert "d0/pipe" in whole.splitlines()  # listed, not opened
    assert "d1/out" in whole.splitlines()  # a link is an entry, not a directory to walk
    assert not any(line.startswith("d1/out/") for line in whole.splitlines())

    stopped = threading.Event()
    stopped.set()
    answer = text_of(LIST_FILES.run(list_env(tmp_path, stopped), {"path": "."}))
    assert answer.endswith("[listing stopped: the run is stopping]")

    monkeypatch.setattr(files, "LIST_SECONDS", 0.0)
    answer = text_of(LIST_FILES.run(list_env(tmp_path, threading.Event()), {"path": "."}))
    assert answer.endswith("[listing cut after 0 s: list a smaller directory]")


def test_search_runs_in_the_sandbox_and_answers_as_before(hostile: AgentRun) -> None:
    run = hostile(
        [
            calls(
                ("search", {"pattern": "def average"}),
                ("search", {"pattern": "no such text anywhere", "path": "calc.py"}),
                ("search", {"pattern": "(unclosed"}),
            ),
            FINISH,
        ]
    )
    found, nothing, bad = outputs(run, "search")
    assert found == {"output": "./calc.py:1:def average(values):\n", "is_error": False}
    assert nothing == {"output": "No match.", "is_error": False}
    assert bad["is_error"]
    assert bad["output"].startswith("search failed: regex parse error")
