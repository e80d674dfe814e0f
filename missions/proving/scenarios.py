"""The supervisor scenario: one coding mission in which a supervisor plans in the ledger, fans
out three readers and two writers, merges the writers' work and is held to its definition of
done by command oracles and a clean-context evaluator — on the offline scripted model, on a
small repository made for it. The tests (tests/missions/test_supervisor.py) and the chaos case
(`missions.proving.chaos_supervisor.supervisor_case`) play the same scenario and read the same
facts of it.

The repository, `shop`: two functions in two files, each with a bug its own test catches
(`prices.total` drops the first price, `text.shout` lower-cases). The supervisor:

1. plans seven items in the ledger, each owned by the sub-agent it will delegate it to (or by
   itself: the merge and the verification);
2. delegates three readers in one call (spawned together, joined once): each reads a file and
   answers its envelope, citing the file;
3. delegates two writers in one call, each in a worktree of its own made from the supervisor's
   checkpoint: each fixes one file, runs that file's tests, commits, and marks its own ledger
   item done with the command it ran as proof;
4. merges both writers' work (`merge_work`: two merge commits), runs the whole test suite,
   closes its own items, and ends;
5. its stop hook checks the criteria: the tests in the sandbox, then the evaluator (a child run
   playing `script["children"]["evaluator"]`), which must cite evidence.

The supervisor names the writers' work to merge by their tasks' names (`merge_work`'s `task`),
as a model would: the script plays fixed arguments, and the run ids are not known before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db.models import Sum

from cluster.sandbox import for_level
from kernel.models import Run, Step, StepKind
from missions import launch
from missions.ledger import contract_name
from missions.models import Mission, Project
from tools import workspace
from tools.git import INSIDE

ROUTES = {"executor": {"provider": "scripted", "model": "scripted"}}
TESTS = "python3 -m unittest -q 2>&1"
TRAILER = "Agentos-Merge: run-"

PRICES = "def total(prices):\n    return sum(prices[1:])\n"
PRICES_FIXED = "def total(prices):\n    return sum(prices)\n"
TEXT = 'def shout(word):\n    return word.lower() + "!"\n'
TEXT_FIXED = 'def shout(word):\n    return word.upper() + "!"\n'
TEST_PRICES = """\
import unittest

from prices import total


class TotalTest(unittest.TestCase):
    def test_sums_every_price(self):
        self.assertEqual(total([3, 4, 5]), 12)
"""
TEST_TEXT = """\
import unittest

from text import shout


class ShoutTest(unittest.TestCase):
    def test_upper_case_and_bang(self):
        self.assertEqual(shout("hey"), "HEY!")
"""
README = "# shop\n\nTwo small helpers. Run the tests with `python3 -m unittest -q`.\n"
GITIGNORE = "__pycache__/\n*.py[cod]\n"

READERS = {
    "read-prices": "prices.py",
    "read-text": "text.py",
    "read-tests": "test_prices.py",
}
# name: (file, its buggy text, its fix, the command that runs its tests)
WRITERS = {
    "fix-prices": ("prices.py", PRICES, PRICES_FIXED, "python3 -m unittest -q test_prices 2>&1"),
    "fix-text": ("text.py", TEXT, TEXT_FIXED, "python3 -m unittest -q test_text 2>&1"),
}
CHILDREN = [*READERS, *WRITERS]  # in the order the supervisor spawns them
FINDING = {
    "type": "object",
    "properties": {"file": {"type": "string"}, "finding": {"type": "string"}},
    "required": ["file", "finding"],
}
FIXED = {
    "type": "object",
    "properties": {"file": {"type": "string"}, "commit": {"type": "string"}},
    "required": ["file"],
}
GOAL = "Make the shop's tests pass: fix prices.total and text.shout, with helpers."
FINAL = "Both bugs are fixed by two writers, merged, and the whole test suite passes."


def create_repository(base: Path) -> Path:
    """The `shop` repository, from scratch, under `base` (where the sandbox users reach it)."""
    repo = base / "shop"
    repo.mkdir(parents=True)
    files = {
        "prices.py": PRICES,
        "text.py": TEXT,
        "test_prices.py": TEST_PRICES,
        "test_text.py": TEST_TEXT,
        "README.md": README,
        ".gitignore": GITIGNORE,
    }
    for name, text in files.items():
        (repo / name).write_text(text)
    workspace.host_git(repo, "init", "--quiet", "--initial-branch=main")
    workspace.host_git(repo, "add", "--all")
    workspace.host_git(repo, "commit", "--quiet", "-m", "shop: total and shout, with tests")
    return repo


def criteria(*, failing: bool = False) -> list[dict[str, Any]]:
    """The definition of done: the tests (a command run in the sandbox) and a review by the
    evaluator; `failing` adds a criterion the scenario's work never meets."""
    written = [
        {
            "id": "tests",
            "description": "The project's whole test suite passes.",
            "oracle": {"command": TESTS},
        },
        {
            "id": "reviewed",
            "description": "Both bugs are fixed in the code itself, the tests left as they were.",
            "oracle": {"evaluator": True},
        },
    ]
    if failing:
        written.append(
            {
                "id": "changelog",
                "description": "CHANGELOG.md records both fixes.",
                "oracle": {"command": "test -s CHANGELOG.md"},
            }
        )
    return written


def _calls(*pairs: tuple[str, dict[str, Any]], text: str = "") -> dict[str, Any]:
    turn: dict[str, Any] = {"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]}
    if text:
        turn["text"] = text
    return turn


def _envelope(payload: dict[str, Any], **evidence: list[str]) -> dict[str, Any]:
    kept = {"commands": [], "tests": [], "sources": [], **evidence}
    return {"text": json.dumps({"status": "done", "payload": payload, "evidence": kept})}


def _reader(name: str, path: str) -> dict[str, Any]:
    return {
        "turns": [
            _calls(("read_file", {"path": path})),
            _envelope(
                {"file": path, "finding": f"read {path}: see its bug for {name}"},
                sources=[path],
            ),
        ]
    }


def _writer(name: str) -> dict[str, Any]:
    path, old, new, command = WRITERS[name]
    return {
        "turns": [
            _calls(("read_file", {"path": path})),  # a file is read before it is edited
            _calls(
                ("edit_file", {"path": path, "old_text": old, "new_text": new}),
                ("shell", {"command": command}),
            ),
            _calls(
                ("git_commit", {"message": f"Fix {path}"}),
                (
                    "ledger_update",
                    {"key": name, "status": "done", "proof": {"commands": [command]}},
                ),
            ),
            _envelope({"file": path}, commands=[command], tests=[command]),
        ]
    }


def _task(name: str, objective: str, *, writes: bool, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "objective": objective,
        "writes": writes,
        "output_schema": schema,
        "done_criteria": [objective],
    }


def script(*, failing: bool = False) -> dict[str, Any]:
    """What the supervisor, its children and its evaluator play."""
    plan = [
        *({"key": name, "title": f"Read {path}", "owner": name} for name, path in READERS.items()),
        *(
            {"key": name, "title": f"Fix {spec[0]}", "owner": name}
            for name, spec in WRITERS.items()
        ),
        {"key": "merge", "title": "Merge the writers' work"},
        {"key": "verify", "title": "Run the whole test suite"},
    ]
    readers = [
        _task(name, f"Read {path} and say what is wrong in it.", writes=False, schema=FINDING)
        for name, path in READERS.items()
    ]
    writers = [
        _task(name, f"Fix {spec[0]} so that its tests pass, and commit.", writes=True, schema=FIXED)
        for name, spec in WRITERS.items()
    ]
    closing = [
        *(
            ("ledger_update", {"key": name, "status": "done", "proof": {"files": [path]}})
            for name, path in READERS.items()
        ),
        ("ledger_update", {"key": "merge", "status": "done", "proof": {"commands": [TESTS]}}),
        ("ledger_update", {"key": "verify", "status": "done", "proof": {"tests": [TESTS]}}),
    ]
    turns = [
        _calls(("ledger_plan", {"items": plan}), text="Planning the work."),
        _calls(("delegate", {"tasks": readers}), text="Reading in parallel."),
        _calls(("delegate", {"tasks": writers}), text="Fixing each file in its own worktree."),
        _calls(*(("merge_work", {"task": name}) for name in WRITERS), text="Merging."),
        _calls(("shell", {"command": TESTS}), text="Running every test."),
        _calls(*closing, text="Closing the plan."),
        # Refused while a criterion fails: the run ends `partial` after the hook's refusals.
        *([{"text": FINAL}] * (3 if failing else 1)),
    ]
    verdicts = {
        "verdicts": [
            {
                "id": "reviewed",
                "passes": True,
                "evidence": "prices.py: `return sum(prices)`; text.py: `word.upper()`; the"
                " changes touch no test file.",
            }
        ]
    }
    return {
        "turns": turns,
        "children": {
            **{name: _reader(name, path) for name, path in READERS.items()},
            **{name: _writer(name) for name in WRITERS},
            "evaluator": {"turns": [{"text": json.dumps(verdicts)}]},
        },
    }


def launch_mission(project: Project, *, failing: bool = False, trigger: str) -> tuple[Mission, Run]:
    """The scenario's mission on `project` (its repository: `create_repository`'s), its root
    run queued with the scenario's script."""
    return launch.create_mission(
        project=project,
        goal=GOAL,
        routes=ROUTES,
        trigger=trigger,
        script=script(failing=failing),
        criteria=criteria(failing=failing),
    )


# --- what happened ------------------------------------------------------------------------------


@dataclass
class Facts:
    """What a scenario's mission did, read from the journal and the supervisor's worktree."""

    status: str
    answer: str
    criteria: dict[str, bool]  # criterion id: passes
    missing: list[str]  # the criteria the run ended without
    children: dict[str, tuple[int, str, str]]  # contract name: (run id, run status, envelope)
    evaluators: list[int]  # the evaluator runs
    spawned: int  # every run of the mission but its root
    merges: list[str]  # the merge commits' trailers, newest first
    files: dict[str, str]  # the supervisor's files the writers fixed
    tokens: tuple[int, int]  # (the root's, the sum of every step of the mission's runs)


def observe(root: Run) -> Facts:
    root.refresh_from_db()
    output = root.output if isinstance(root.output, dict) else {}
    runs = list(Run.objects.filter(root=root).exclude(pk=root.pk).order_by("pk"))
    envelopes = {
        entry["name"]: entry["status"]
        for step in Step.objects.filter(run=root, kind=StepKind.TOOL_CALL, name="delegate")
        for entry in _entries(step.result)
    }
    children = {
        contract_name(run): (run.pk, run.status, envelopes.get(contract_name(run), ""))
        for run in runs
        if contract_name(run)
    }
    steps = Step.objects.filter(run__root=root).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens")
    )
    body = git(root, "log", "--merges", "--format=%B") if root.workspace else ""
    top = Path(root.workspace) if root.workspace else None
    return Facts(
        status=root.status,
        answer=str(output.get("answer", "")),
        criteria={c["id"]: bool(c["passes"]) for c in output.get("criteria", [])},
        missing=[m["id"] for m in output.get("missing", [])],
        children=children,
        evaluators=[run.pk for run in runs if (run.input or {}).get("role") == "evaluator"],
        spawned=len(runs),
        merges=[line for line in body.splitlines() if line.startswith(TRAILER)],
        files={
            name: (top / name).read_text() if top and (top / name).exists() else ""
            for name in ("prices.py", "text.py")
        },
        tokens=(root.input_tokens + root.output_tokens, (steps["i"] or 0) + (steps["o"] or 0)),
    )


def _entries(result: Any) -> list[dict[str, Any]]:
    """The envelopes a `delegate` call returned (its output: a JSON list, as data)."""
    output = result.get("output") if isinstance(result, dict) else None
    if not isinstance(output, str):
        return []
    try:
        found = json.loads(output)
    except ValueError:  # offloaded to an artifact: too long to be this scenario's
        return []
    if not isinstance(found, list):
        return []
    return [e for e in found if isinstance(e, dict) and "name" in e and "status" in e]


def git(run: Run, *args: str) -> str:
    """git's output on `run`'s worktree, run inside its sandbox (the tree is the agent's)."""
    done = for_level(1).run(
        ["git", *INSIDE, *args], workdir=Path(run.workspace), run_id=run.pk, stderr_apart=True
    )
    if done.exit_code != 0:
        raise RuntimeError(f"git {args[0]} failed in run {run.pk}'s worktree: {done.errors}")
    return str(done.output)
