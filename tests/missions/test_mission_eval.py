"""`manage.py mission_eval`: the default suite's tasks run offline end to end — a project and a
mission each through the launch path, a real in-process worker, the scripted model's real edits
and commands in the sandbox — and the oracle, not the mission, decides what is completed: a
script that does not fix the bug, or answers wrongly, ends `done` and is reported not completed.
Bad arguments are refused with a precise message."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from psycopg import sql

from agentos.backups import pg
from agentos.core import database
from cluster.identity import give
from kernel.models import TERMINAL, Run
from missions.evals import oracle, runner
from missions.evals.suite import SUITES, load
from missions.models import Mission
from tools import registry, workspace

# Every test here has the seeded catalog (this folder's conftest), hence a database.
pytestmark = pytest.mark.django_db

THREE = ["py-off-by-one", "js-async-foreach", "research-invoices"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key: the offline model plays the tasks' scripts."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# The missions run on a real worker, which commits as it goes: a transactional database.
end_to_end = pytest.mark.django_db(transaction=True)


def mission_eval(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("mission_eval", *args, "--any-database", stdout=out)
    return out.getvalue().splitlines()


def metrics(line: str) -> dict[str, str]:
    assert line.startswith("mission_eval "), line
    return dict(part.split("=", 1) for part in line.split()[1:])


def rows(lines: list[str]) -> dict[str, list[str]]:
    """The table's rows by task: kind, status, oracle, tokens, cost, wall."""
    start = next(i for i, line in enumerate(lines) if line.startswith("task "))
    found = {}
    for line in lines[start + 1 :]:
        cells = line.split()
        if len(cells) != 7:
            break
        found[cells[0]] = cells[1:]
    return found


@end_to_end
def test_three_tasks_of_the_default_suite_complete_offline() -> None:
    lines = mission_eval("default", "--mode", "single", "--tasks", ",".join(THREE))

    table = rows(lines)
    assert list(table) == THREE
    for task in THREE:
        _kind, status, verdict, tokens, _cost, wall = table[task]
        assert (status, verdict) == ("done", "pass"), "\n".join(lines)
        assert int(tokens.replace(",", "")) > 0
        assert float(wall) > 0
    assert table["research-invoices"][0] == "research"
    summary = metrics(lines[-1])
    assert summary["suite"] == "default"
    assert summary["mode"] == "single"
    assert (summary["tasks"], summary["completed"], summary["rate"]) == ("3", "3", "1.000")
    assert int(summary["tokens_per_completed"]) > 0
    assert float(summary["wall_s"]) > 0
    assert "completed 3/3 (100%)" in lines[-2]
    # One mission per task, through the launch path, each on a repository of its own; the
    # coding missions ended with the agent's own commit (what the oracle tested).
    missions = Mission.objects.filter(project__name__contains="eval ")
    assert missions.count() == 3
    assert len({mission.project.repository for mission in missions}) == 3
    roots = Run.objects.filter(account__in=missions, parent__isnull=True)
    assert {root.status for root in roots} == {"done"}
    commits = [
        step.result["output"]
        for root in roots
        for step in root.steps.filter(name="git_commit")
        if step.result
    ]
    assert len(commits) == 2
    assert all(output.startswith("Committed ") for output in commits)


def broken_suite(tmp_path: Path) -> Path:
    """Tasks of the default suite whose scripts fail at the task while the mission still ends
    `done`: the coding one never edits (it just says it is done), the research one computes the
    attendance of the wrong year. And one whose script (given in full) waits for the owner."""
    suite = tmp_path / "broken"
    for name in ("py-off-by-one", "research-meetups", "research-leave-policy"):
        shutil.copytree(SUITES / "default" / name, suite / name)
    asking = suite / "research-leave-policy" / "task.json"
    data = json.loads(asking.read_text())
    question = {"name": "ask_owner", "arguments": {"question": "Which policy do you mean?"}}
    data["scripts"] = {"single": {"turns": [{"tool_calls": [question]}, {"text": "29"}]}}
    asking.write_text(json.dumps(data))
    coding = suite / "py-off-by-one" / "task.json"
    data = json.loads(coding.read_text())
    data["plan"]["edits"] = []  # the turn that should edit answers instead: the run ends done
    coding.write_text(json.dumps(data))
    research = suite / "research-meetups" / "task.json"
    data = json.loads(research.read_text())
    data["plan"]["command"] = data["plan"]["command"].replace("2023-", "2022-")
    research.write_text(json.dumps(data))
    return suite


@end_to_end
def test_the_oracle_reports_a_mission_that_did_not_do_the_task_as_not_completed(
    tmp_path: Path,
) -> None:
    lines = mission_eval(str(broken_suite(tmp_path)))

    table = rows(lines)
    assert table["py-off-by-one"][1:3] == ["done", "FAIL"]
    assert table["research-meetups"][1:3] == ["done", "FAIL"]
    # Nobody answers during an evaluation: the mission is stopped, and judged as it is.
    assert table["research-leave-policy"][1:3] == ["waiting", "FAIL"]
    text = "\n".join(lines)
    assert "FAILED (failures=" in text  # the tests, as the oracle ran them in the sandbox
    assert "expected '277'" in text
    assert "the mission ended cancelled, without an answer" in text
    assert not Run.objects.exclude(status__in=TERMINAL).exists()
    summary = metrics(lines[-1])
    assert (summary["completed"], summary["rate"]) == ("0", "0.000")
    assert summary["tokens_per_completed"] == "none"
    assert summary["cost_per_completed"] == "none"


@end_to_end
def test_the_budget_caps_each_missions_tokens() -> None:
    lines = mission_eval("default", "--tasks", "py-sort-key", "--budget", "2000")

    assert rows(lines)["py-sort-key"][1:3] == ["budget_exhausted", "FAIL"], "\n".join(lines)
    mission = Mission.objects.get()
    assert mission.max_tokens == 2000
    assert 2000 <= mission.spent()["tokens"] < 8000  # stopped at the first step past the cap


@end_to_end
def test_the_supervisor_mode_delegates_and_completes() -> None:
    try:
        lines = mission_eval("default", "--mode", "multi", "--tasks", "py-regex,research-incident")
    except CommandError as error:
        if "The multi mode needs the delegate tool" not in str(error):
            raise
        pytest.skip(f"no supervisor mode in this checkout yet: {error}")

    assert metrics(lines[-1])["completed"] == "2", "\n".join(lines)
    assert Run.objects.filter(parent__isnull=False).count() >= 3  # the workers of both missions


def test_the_multi_mode_is_refused_without_the_delegate_tool() -> None:
    delegate = registry.TOOLS.remove("delegate")  # as before sub-agents
    try:
        with pytest.raises(CommandError, match=r"The multi mode needs the delegate tool"):
            mission_eval("default", "--mode", "multi")
    finally:
        registry.TOOLS.add(delegate.name, delegate)
    assert not Mission.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["nosuch"],
            "Unknown suite 'nosuch': it is neither a shipped suite (analysis, automation,"
            " default, programming, research) nor a",
        ),
        (["default", "--mode", "swarm"], "Unknown mode 'swarm'; modes: single, multi."),
        (["default", "--budget", "0"], "--budget is a positive integer of tokens, not '0'."),
        (["default", "--budget", "-5"], "--budget is a positive integer of tokens, not '-5'."),
        (["default", "--budget", "lots"], "--budget is a positive integer of tokens, not 'lots'."),
        (["default", "--budget", "1.5"], "--budget is a positive integer of tokens, not '1.5'."),
        (
            ["default", "--tasks", "py-regex,nosuch"],
            "Unknown task(s) in suite default: nosuch. Its tasks: js-async-foreach,",
        ),
        (["default", "--tasks", "py-regex,,py-sort-key"], "none empty"),
        (["default", "--tasks", "py-regex,py-regex"], "A task is named twice in --tasks."),
    ],
)
def test_bad_arguments_are_refused_precisely(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as refused:
        mission_eval(*args)
    assert message in str(refused.value)
    assert not Mission.objects.exists()


def test_it_refuses_the_owners_database_unless_told() -> None:
    with pytest.raises(CommandError, match=r"not a dedicated evaluation one\. Use `make eval`"):
        call_command("mission_eval", "default", "--tasks", "py-regex", stdout=io.StringIO())


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database on the test server that was never migrated: no table at all."""
    name = f"never_migrated_{uuid.uuid4().hex[:8]}"
    with pg.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    yield name
    with pg.connect(autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def test_a_database_never_migrated_is_one_clear_error_and_a_failure(
    tmp_path: Path, empty_database: str
) -> None:
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(pg.entry(empty_database)),
        "AGENTOS_DATA_DIR": str(tmp_path / "data"),
    }

    done = subprocess.run(  # our own manage.py, as the owner runs it
        [sys.executable, "manage.py", "mission_eval", "default", "--any-database"],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "CommandError: The database has no tables: run `manage.py migrate` first, or use `make"
        " eval`, whose data dir (.data/eval) is migrated for it."
    ]
    assert done.stdout == ""  # not a line per task


def test_a_malformed_task_is_refused_with_its_file_and_reason(tmp_path: Path) -> None:
    suite = tmp_path / "bad"
    shutil.copytree(SUITES / "default" / "py-regex", suite / "py-regex")
    where = suite / "py-regex" / "task.json"
    data = json.loads(where.read_text())
    data["plan"]["edits"][0]["old_text"] = "not in the file"
    where.write_text(json.dumps(data))

    with pytest.raises(CommandError) as refused:
        mission_eval(str(suite))
    assert str(refused.value) == (
        f"{where}: an edit's old_text must occur exactly once in versions.py."
    )

    del data["oracle"]["protect"]
    where.write_text(json.dumps(data))
    with pytest.raises(CommandError, match=re.escape(f"{where}: 'protect' is a required")):
        mission_eval(str(suite))


def test_the_default_suite_ships_its_tasks() -> None:
    suite = load("default")
    kinds = [task.kind for task in suite.tasks]
    assert kinds.count("coding") >= 10
    assert kinds.count("research") >= 5
    commands = {task.test_command.split()[0] for task in suite.tasks if task.kind == "coding"}
    assert commands == {"python3", "node"}  # two languages the sandbox runs
    for task in suite.tasks:
        for mode in ("single", "multi"):
            assert task.script(mode)["turns"], (task.name, mode)
        if task.kind == "coding":
            assert task.protected(), task.name  # the oracle restores the tests as shipped
    multi = suite.tasks[0].script("multi")
    delegated = multi["turns"][0]["tool_calls"][0]
    assert delegated["name"] == "delegate"
    names = [contract["name"] for contract in delegated["arguments"]["tasks"]]
    assert set(names) == set(multi["children"])
    for contract in delegated["arguments"]["tasks"]:
        assert contract["done_criteria"]
        assert contract["objective"]


@pytest.fixture
def fixtures_base() -> Iterator[Path]:
    """Where the sandbox user can reach the tasks' repositories."""
    base = workspace.root() / "test-evals" / uuid.uuid4().hex[:8]
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(
    "name", [task.name for task in load("default").tasks if task.kind == "coding"]
)
def test_each_coding_task_fails_its_oracle_as_shipped_and_passes_it_fixed(
    name: str, fixtures_base: Path
) -> None:
    """The tasks are sound: their tests fail on the code as shipped, so a mission that changes
    nothing is never completed, and pass once the plan's fix is committed."""
    task = load("default").select([name])[0]
    shipped = runner.materialise(task, fixtures_base / "shipped")
    fixed = runner.materialise(task, fixtures_base / "fixed")
    for edit in task.plan["edits"]:  # our own fixture's files: the host may edit and commit them
        path = fixed / edit["path"]
        path.write_text(path.read_text().replace(edit["old_text"], edit["new_text"]))
    workspace.host_git(fixed, "commit", "--quiet", "--all", "-m", task.plan["message"])
    for repository in (shipped, fixed):
        give(repository)

    before = oracle.run_tests(shipped, None, task.test_command, task.protected())
    after = oracle.run_tests(fixed, None, task.test_command, task.protected())

    assert not before.passed, before.detail
    assert after.passed, after.detail


@pytest.mark.parametrize(
    ("answer", "expected", "passed"),
    [
        ("The total is 1,284.50 EUR.", ["1284.50"], True),
        ("The total is 1 284.50 EUR.", ["1284.50"], True),
        ("Kestrel Logistics billed the most.", ["Kestrel Logistics"], True),
        ("KESTREL  logistics", ["Kestrel Logistics"], True),
        ("It was 142 people.", ["42"], False),
        ("It was 42.5 people.", ["42"], False),
        ("Removed in v3.2.0.", ["3.2.0"], False),
        ("Removed in v3.2.0.", ["3.2.0", "v3.2.0"], True),
        ("Removed in 3.2.0.", ["3.2.0"], True),
        ("", ["3.2.0"], False),
    ],
)
def test_the_answer_matcher(answer: str, expected: list[str], passed: bool) -> None:
    assert oracle.check_answer(answer, expected).passed is passed
