"""The offline missions end to end, without any model key: a real worker runs the offline model's
script with the real loop and tools (the sandboxed shell, the file tools) on a real repository,
and the report quotes what the tools returned — failing tests, passing tests, no tests, a test
command that cannot run — byte for byte, also after the worker is killed mid-way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from kernel.models import Run, Step, StepKind
from kernel.worker import Worker
from missions import offline
from missions.launch import create_mission
from missions.models import Project
from missions.providers.scripted import LABEL
from tests.live import crash_env
from tests.polling import wait_for
from tests.processes import stop
from tests.tools.repositories import calc, repository
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new owner has: no provider key at all."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def start(repo: Path, key: str) -> Run:
    project = Project.objects.create(name=f"p-{repo.parent.name}", repository=str(repo))
    _mission, run = create_mission(project=project, offline=key, trigger="console")
    return run


def play(repo: Path, key: str) -> tuple[Run, str]:
    """Start the offline mission `key` on `repo`, run it to its end; the run and its report."""
    run = start(repo, key)
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    assert run.status == "done", run.error
    assert isinstance(run.output, dict)
    return run, str(run.output["answer"])


def shell_output(run: Run) -> str:
    (step,) = Step.objects.filter(run=run, kind=StepKind.TOOL_CALL, name="shell")
    assert step.result is not None
    return str(step.result["output"])


def test_it_runs_failing_tests_and_quotes_what_fails(demo_base: Path) -> None:
    run, report = play(calc(demo_base), "run-tests")

    assert report.startswith(f"{LABEL}Test report. {offline.QUOTED}\n\n")
    assert "Test command: python3 -m unittest discover -v (found: Python test files)" in report
    assert "Result: the test command failed (exit status 1)." in report
    assert "FAIL: test_mean_of_three (test_calc.AverageTest.test_mean_of_three)" in report
    assert "AssertionError: 6.0 != 4" in report
    assert "ZeroDivisionError: division by zero" in report
    assert report.endswith("FAILED (failures=1, errors=1)\n[exit code 1]")
    assert "passed" not in report
    # The report is the tool's output, verbatim: nothing added, nothing judged.
    assert report == f"{LABEL}Test report. {offline.QUOTED}\n\n{shell_output(run)}"
    mission = run.account.mission
    assert mission.goal == "Run the tests and report what fails."
    assert mission.routes["executor"]["provider"] == "scripted"
    assert run.contract["offline"] == "run-tests"
    assert run.contract["scripted_stand_in"] is False


def test_it_runs_passing_tests_and_says_they_passed(demo_base: Path) -> None:
    _run, report = play(calc(demo_base, fixed=True), "run-tests")

    assert "Result: the test command passed (exit status 0)." in report
    assert "Ran 3 tests" in report
    assert report.endswith("OK\n[exit code 0]")
    assert "failed" not in report
    assert "Lines that mention a failure" not in report


def test_it_says_so_when_it_finds_no_tests(demo_base: Path) -> None:
    _run, report = play(repository(demo_base, {"README.md": "# notes\n"}), "run-tests")

    assert "Result: no test command found, so no tests were run." in report
    assert report.endswith("[exit code 3]")
    assert "passed" not in report


def test_it_says_so_when_the_test_command_cannot_run(demo_base: Path) -> None:
    repo = repository(demo_base, {"Makefile": "test:\n\tnonexistent-test-runner --all\n"})

    _run, report = play(repo, "run-tests")

    assert "Test command: make test (found: the Makefile has a test target)" in report
    assert "Result: the test command failed (exit status 2)." in report
    assert "nonexistent-test-runner" in report
    assert "passed" not in report


def test_it_surveys_a_repository(demo_base: Path) -> None:
    run, report = play(calc(demo_base), "survey")

    assert report.startswith(f"{LABEL}Survey of the repository. {offline.QUOTED}\n\nTop level:\n")
    assert "\ncalc.py\n" in report  # the listing of the file tool
    assert "test_calc.py" in report
    assert "Tracked files: 4," in report
    assert "Python" in report
    assert "README.md, its first 12 lines:\n# calc\n" in report
    assert "Commits: 1. The 10 most recent:" in report
    assert "First commit: the project as it is" in report
    assert "TODO, FIXME, XXX and HACK markers: 0 in 0 file(s)." in report
    assert report.endswith(f"{shell_output(run)}")
    assert run.contract["offline"] == "survey"


# --- killed mid-way ------------------------------------------------------------------------------


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "kernel_worker",
            "--lease",
            "2",
            "--poll",
            "0.2",
        ],
        env=env,
    )


@pytest.mark.timeout(400)  # measured 15 s; each of its three worker lives may take 120 s
@pytest.mark.chaos
def test_a_worker_killed_mid_way_resumes_to_the_same_report(
    demo_base: Path, tmp_path: Path
) -> None:
    run = start(calc(demo_base), "run-tests")
    # Steps, as the script plays them: 1 workspace, 2 window, 3 resume routine, 4 model,
    # 5 list_files, 6 model, 7 checkpoint, 8 shell; killed, claimed again: 9 the resume routine,
    # 10 model (the report).
    shell, report = 8, 10
    targets = [
        {"run": run.pk, "point": "after_effect_before_result", "seq": shell},
        {"run": run.pk, "point": "after_effect_before_result", "seq": report},
    ]
    env = crash_env(tmp_path, targets, AGENTOS_WORKSPACES_DIR=str(workspace.root()))
    assert start_worker(env).wait(timeout=120) == -9  # ran the tests, killed before recording
    assert start_worker(env).wait(timeout=120) == -9  # wrote the report, killed before recording
    worker = start_worker(env)
    try:
        wait_for(
            lambda: Run.objects.get(pk=run.pk).is_terminal,
            timeout=120,
            message="the run to end",
            interval=0.05,
        )
    finally:
        stop(worker)

    run.refresh_from_db()
    assert run.status == "done", run.error
    assert Step.objects.get(run=run, kind=StepKind.TOOL_CALL, name="shell").seq == shell
    assert Step.objects.filter(run=run, kind=StepKind.MODEL_CALL).last().seq == report  # type: ignore[union-attr]
    # The report written again after the kill is, byte for byte, the recorded test output.
    assert isinstance(run.output, dict)
    answer = run.output["answer"]
    assert answer == f"{LABEL}Test report. {offline.QUOTED}\n\n{shell_output(run)}"
    assert "Result: the test command failed (exit status 1)." in answer
