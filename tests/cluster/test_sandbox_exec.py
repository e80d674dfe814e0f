"""`manage.py sandbox_exec`: an owner's check of a node's sandbox, run as the shell tool runs."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.polling import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="level 1 is Linux bubblewrap")

ROOT = Path(__file__).resolve().parents[2]


def sandbox_exec(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("sandbox_exec", *args, stdout=out)
    except SystemExit as exit_:
        return (exit_.code if isinstance(exit_.code, int) else -1), out.getvalue()
    return 0, out.getvalue()


def manage(*args: str) -> subprocess.Popen[str]:
    # A placeholder URL: the command needs no database, so none is started.
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": "postgresql://unused@/unused"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_it_prints_the_output_and_propagates_the_exit_code(workdir: Path) -> None:
    code, out = sandbox_exec("--workdir", str(workdir), "--", "sh", "-c", "echo hi; exit 3")

    assert code == 3
    assert out == "hi\n[exit code 3]\n"


def test_it_exits_zero_when_the_command_succeeds(workdir: Path) -> None:
    assert sandbox_exec("--level", "1", "--workdir", str(workdir), "--", "true") == (
        0,
        "[exit code 0]\n",
    )


def test_it_exits_124_on_timeout(workdir: Path) -> None:
    code, out = sandbox_exec("--workdir", str(workdir), "--timeout", "0.3", "--", "sleep", "5")

    assert code == 124
    assert out.startswith("[timed out after 0.3")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workdir", "/nonexistent/agentos", "--", "true"], "is not a directory"),
        (["--level", "0", "--workdir", "/", "--", "true"], "level 0 has no shell"),
        (["--level", "9", "--workdir", "/", "--", "true"], "unknown sandbox level 9"),
        (["--workdir", "/"], "nothing to run"),
        (["--workdir", "/", "--timeout", "0", "--", "true"], "--timeout must be positive"),
    ],
)
def test_it_refuses_bad_input_with_exit_code_2(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message) as raised:
        call_command("sandbox_exec", *args)

    assert raised.value.returncode == 2


def test_it_works_from_manage_py_and_stops_on_ctrl_c(workdir: Path) -> None:
    script = "echo out; echo err >&2; exit 7"
    # Both at once: each pays for Django's start.
    ok = manage("sandbox_exec", "--workdir", str(workdir), "--", "sh", "-c", script)
    bad = manage("sandbox_exec", "--workdir", str(workdir / "missing"), "--", "true")

    interrupted = manage(
        "sandbox_exec", "--workdir", str(workdir), "--", "sh", "-c", "touch started; sleep 30"
    )
    wait_for(lambda: (workdir / "started").exists(), timeout=30, message="the command to start")
    interrupted.send_signal(signal.SIGINT)  # Ctrl-C
    ok_out, ok_err = ok.communicate(timeout=60)
    _, bad_err = bad.communicate(timeout=60)
    interrupted_out, _ = interrupted.communicate(timeout=60)

    assert (ok.returncode, ok_out) == (7, "out\nerr\n[exit code 7]\n"), ok_err
    assert bad.returncode == 2
    assert f"the workdir {workdir / 'missing'} is not a directory" in bad_err
    assert (interrupted.returncode, interrupted_out) == (130, "[cancelled]\n")
