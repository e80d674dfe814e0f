"""A suite: a directory with one directory per task.

A task's directory holds `task.json` and `repo/`, the files of its repository (a small project
with a failing test suite, or a set of documents), materialised into a fresh git repository for
each attempt. `task.json`:

- `kind`: `coding` (the oracle runs a test command), `research` (the oracle compares the
  mission's final answer with the expected one), `figures` (the answer's numbers, each within a
  tolerance) or `citations` (the expected answer, backed by passages found again in their
  sources);
- `title`, `goal`, `done` (the definition of done, a list of sentences);
- `oracle`: for coding `{"command": ..., "protect": [paths]}` — the command runs in the sandbox
  on the commit the mission ended with, after the protected files (its tests) are put back as
  the task ships them, so a mission cannot pass by editing its tests; for research
  `{"answer": ..., "accept": [other spellings]}`; for figures `{"figures": [{"name", "value",
  "abs" | "rel", "label"}]}` (each found under `name` in a JSON object of the answer, or after
  `label` in its text); for citations `{"answer", "accept", "sources": [paths or URLs, one of
  which must be cited], "min_citations"}` (`missions.evals.oracle`);
- `plan`: what the offline model's scripts are built from (`script`) — for coding the files to
  read, the cause, the edits (`edit_file` arguments) and the commit message; for research the
  documents to read and the command that finds the answer in the sandbox (figures too: the
  command prints the figures as JSON); for citations the documents to read, the pages to fetch
  (`fetch`), the answer and the passages it cites (`missions.evals.plays`). A coding plan may
  also create files (`writes`: `write_file` arguments);
- `scripts` (optional): `{"single": script, "multi": script}` played instead of the built ones.

A task may also ship `site/`: pages the evaluation serves on 127.0.0.1 while the task runs (the
mission may fetch that host only); `{site}` in its task.json stands for the site's address.

The scripts are what the offline model plays, for the tests; with a provider key the real model
runs the same goal and the scripts are not used. Whatever a script does, only the oracle decides
whether the task is completed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from missions.evals import plays

SUITES = Path(__file__).resolve().parent / "suites"
MODES = ("single", "multi")
KINDS = ("coding", "research", "figures", "citations")
TASK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")
MAX_FILE_BYTES = 256 * 1024
MAX_FILES = 200
# What the repository of an attempt ignores: test runs leave caches; no commit should carry them.
GITIGNORE = "__pycache__/\n*.py[cod]\nnode_modules/\n"
# Read-only workers of the supervisor's scripts use only tools that cannot write.
READ_TOOLS = ["list_files", "read_file", "search"]

_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}
_EDIT = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "old_text": {"type": "string", "minLength": 1},
        "new_text": {"type": "string"},
    },
    "required": ["path", "old_text", "new_text"],
    "additionalProperties": False,
}
_WRITE = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1}, "content": {"type": "string"}},
    "required": ["path", "content"],
    "additionalProperties": False,
}
_SCRIPTS = {
    "type": "object",
    "properties": {mode: {"type": "object", "required": ["turns"]} for mode in MODES},
    "additionalProperties": False,
}
_COMMON = {
    "kind": {"enum": list(KINDS)},
    "title": {"type": "string", "minLength": 1, "maxLength": 200},
    "goal": {"type": "string", "minLength": 1, "maxLength": 5000},
    "done": {**_STRINGS, "minItems": 1},
    "scripts": _SCRIPTS,
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "coding": {
        "type": "object",
        "properties": {
            **_COMMON,
            "oracle": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "maxLength": 2000},
                    "protect": _STRINGS,
                },
                "required": ["command", "protect"],
                "additionalProperties": False,
            },
            "plan": {
                "type": "object",
                "properties": {
                    "read": {**_STRINGS, "minItems": 1},
                    "cause": {"type": "string", "minLength": 1},
                    "edits": {"type": "array", "items": _EDIT},
                    "writes": {"type": "array", "items": _WRITE},
                    "message": {"type": "string", "minLength": 1},
                },
                "required": ["read", "cause", "edits", "message"],
                "additionalProperties": False,
            },
        },
        "required": ["kind", "title", "goal", "done", "oracle", "plan"],
        "additionalProperties": False,
    },
    "research": {
        "type": "object",
        "properties": {
            **_COMMON,
            "oracle": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string", "minLength": 1, "maxLength": 200},
                    "accept": _STRINGS,
                },
                "required": ["answer"],
                "additionalProperties": False,
            },
            "plan": {
                "type": "object",
                "properties": {
                    "read": {**_STRINGS, "minItems": 1},
                    "command": {"type": "string", "minLength": 1},
                    "explain": {"type": "string", "minLength": 1},
                },
                "required": ["read", "command", "explain"],
                "additionalProperties": False,
            },
        },
        "required": ["kind", "title", "goal", "done", "oracle", "plan"],
        "additionalProperties": False,
    },
}


SCHEMAS.update(plays.schemas(_COMMON, _STRINGS))


class SuiteError(Exception):
    """A suite or task that cannot be used, or an unknown one: the message says which and why."""


@dataclass(frozen=True)
class Task:
    name: str
    kind: str
    title: str
    goal: str
    done: list[str]
    oracle: dict[str, Any]
    plan: dict[str, Any]
    files: dict[str, bytes]  # the repository: relative path -> content
    scripts: dict[str, dict[str, Any]]
    site: dict[str, bytes] = field(default_factory=dict)  # pages served: URL path -> content

    @property
    def test_command(self) -> str:
        return str(self.oracle["command"])

    def protected(self) -> dict[str, bytes]:
        """The files the coding oracle restores before it runs: the tests, as shipped."""
        return {path: self.files[path] for path in self.oracle.get("protect", [])}

    def expected(self) -> list[str]:
        """The research oracle's accepted answers, the main one first."""
        return [self.oracle["answer"], *self.oracle.get("accept", [])]

    def script(self, mode: str) -> dict[str, Any]:
        """What the offline model plays for this task in `mode`."""
        if mode in self.scripts:
            return self.scripts[mode]
        build = {
            ("coding", "single"): _coding_single,
            ("coding", "multi"): _coding_multi,
            ("research", "single"): _research_single,
            ("research", "multi"): _research_multi,
            ("figures", "single"): _research_single,
            ("figures", "multi"): _research_multi,
        }.get((self.kind, mode))
        if build is None:  # citations: its supervisor's workers are this module's readers
            return plays.citations(self, multi=mode == "multi", reader=_reader)
        return build(self)


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    tasks: list[Task]

    def select(self, names: list[str] | None) -> list[Task]:
        """The tasks named (in the order given), or all; an unknown name is refused."""
        if not names:
            return list(self.tasks)
        by_name = {task.name: task for task in self.tasks}
        unknown = [name for name in names if name not in by_name]
        if unknown:
            raise SuiteError(
                f"Unknown task(s) in suite {self.name}: {', '.join(unknown)}. Its tasks:"
                f" {', '.join(by_name)}."
            )
        if len(set(names)) != len(names):
            raise SuiteError("A task is named twice in --tasks.")
        return [by_name[name] for name in names]


def shipped() -> list[str]:
    return sorted(path.name for path in SUITES.iterdir() if (path / "suite.json").is_file())


def resolve(suite: str) -> Path:
    """A shipped suite by name, else a directory path."""
    if TASK_NAME.match(suite) and (SUITES / suite / "suite.json").is_file():
        return SUITES / suite
    path = Path(suite).expanduser()
    if path.is_dir():
        return path.resolve()
    raise SuiteError(
        f"Unknown suite {suite!r}: it is neither a shipped suite ({', '.join(shipped())}) nor a"
        " directory."
    )


def load(suite: str) -> Suite:
    path = resolve(suite)
    tasks = [
        load_task(entry)
        for entry in sorted(path.iterdir())
        if entry.is_dir() and (entry / "task.json").is_file()
    ]
    if not tasks:
        raise SuiteError(f"The suite {path} has no task (a directory with a task.json).")
    return Suite(name=path.name, path=path, tasks=tasks)


def load_task(path: Path) -> Task:
    where = path / "task.json"
    if not TASK_NAME.match(path.name):
        raise SuiteError(
            f"{path}: a task's directory name is lowercase letters, digits and dashes (at most"
            " 48), starting with a letter or digit."
        )
    try:
        data = json.loads(where.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SuiteError(f"{where}: not readable JSON ({error}).") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in KINDS:
        raise SuiteError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r}.")
    problem = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(SCHEMAS[kind]).iter_errors(data)
    )
    if problem is not None:
        at = "/".join(str(part) for part in problem.absolute_path) or "the top level"
        raise SuiteError(f"{where}: {problem.message} (at {at}).")
    files = _files(path / "repo")
    site = _files(path / "site") if (path / "site").exists() else {}
    if not site and plays.uses_site(data):
        raise SuiteError(f"{where}: names {plays.SITE} pages, and the task has no site/.")
    plan = data["plan"]
    named = [*plan["read"], *data["oracle"].get("protect", [])]
    named += plays.paths_named(data)
    named += [edit["path"] for edit in plan.get("edits", [])]
    missing = sorted({name for name in named if name not in files})
    if missing:
        raise SuiteError(f"{where}: names file(s) its repo/ does not have: {', '.join(missing)}.")
    for edit in plan.get("edits", []):
        text = files[edit["path"]].decode()
        if text.count(edit["old_text"]) != 1:
            raise SuiteError(
                f"{where}: an edit's old_text must occur exactly once in {edit['path']}."
            )
    return Task(
        name=path.name,
        kind=kind,
        title=data["title"],
        goal=data["goal"],
        done=list(data["done"]),
        oracle=data["oracle"],
        plan=plan,
        files=files,
        scripts=data.get("scripts", {}),
        site=site,
    )


def _files(repo: Path) -> dict[str, bytes]:
    if not repo.is_dir():
        raise SuiteError(f"{repo}: missing (a task's repository files live in repo/).")
    files: dict[str, bytes] = {}
    for entry in sorted(repo.rglob("*")):
        if entry.is_symlink():
            raise SuiteError(f"{entry}: a link; a task's repository holds regular files only.")
        if not entry.is_file():
            continue
        rel = entry.relative_to(repo).as_posix()
        if rel.split("/")[0] == ".git" or "__pycache__" in rel.split("/"):
            continue
        if entry.stat().st_size > MAX_FILE_BYTES:
            raise SuiteError(f"{entry}: over {MAX_FILE_BYTES} bytes.")
        files[rel] = entry.read_bytes()
    if not files:
        raise SuiteError(f"{repo}: empty.")
    if len(files) > MAX_FILES:
        raise SuiteError(f"{repo}: over {MAX_FILES} files.")
    return files


# --- The offline model's scripts ----------------------------------------------------------------
#
# Built from a task's plan, as a careful agent would work: look, run the tests, edit, run them
# again, commit, then report by quoting what the tools returned (`{output:T.N}`), so a fix that
# does not work is reported as the tests show it. The supervisor's scripts delegate the reading
# to workers in parallel (`delegate`, each child's script under `children`), then do the rest.


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _reads(paths: list[str]) -> list[dict[str, Any]]:
    return [_call("read_file", path=path) for path in paths]


def _fixing_turns(task: Task, first: int) -> list[dict[str, Any]]:
    """Edit, test again, commit, report: turns `first` to `first + 3`."""
    plan, test = task.plan, task.test_command + " 2>&1"
    return [
        {
            "text": plan["cause"],
            "tool_calls": [
                *(_call("write_file", **write) for write in plan.get("writes", [])),
                *(_call("edit_file", **edit) for edit in plan["edits"]),
            ],
        },
        {
            "text": "Running the tests again.",
            "tool_calls": [_call("shell", command=test)],
        },
        {
            "text": "Committing the change.",
            "tool_calls": [_call("git_commit", message=plan["message"])],
        },
        {
            "text": f"{plan['cause']} The tests after the change, as the sandbox ran them:\n"
            f"{{output:{first + 1}.1}}",
            "on_error": {"text": "Not done: the change could not be committed. {error}"},
        },
    ]


def _coding_single(task: Task) -> dict[str, Any]:
    test = task.test_command + " 2>&1"
    return {
        "turns": [
            {
                "text": "Looking at the repository, the code and its tests.",
                "tool_calls": [_call("list_files"), *_reads(task.plan["read"])],
            },
            {
                "text": "Running the tests to see what fails.",
                "tool_calls": [_call("shell", command=test)],
            },
            *_fixing_turns(task, 3),
        ]
    }


def _envelope(payload: dict[str, Any], sources: list[str]) -> str:
    return json.dumps(
        {
            "status": "done",
            "payload": payload,
            "artifacts": [],
            "evidence": {"commands": [], "tests": [], "sources": sources},
            "open_questions": [],
        }
    )


_FAILED = json.dumps(
    {
        "status": "failed",
        "payload": {},
        "artifacts": [],
        "evidence": {"commands": [], "tests": [], "sources": []},
        "open_questions": [],
        "error": "The files could not be read.",
    }
)


def _reader(
    name: str, objective: str, paths: list[str], payload: dict[str, Any], schema: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A read-only worker's contract and its script: read the files, answer the envelope."""
    contract = {
        "name": name,
        "objective": objective,
        "context": paths,
        "boundaries": ["Change no file; read only."],
        "writes": False,
        "tools": READ_TOOLS,
        "output_schema": schema,
        "done_criteria": [f"Reports on {', '.join(paths)}, citing them as sources."],
    }
    script = {
        "turns": [
            {"text": f"Reading {', '.join(paths)}.", "tool_calls": _reads(paths)},
            {"text": _envelope(payload, paths), "on_error": {"text": _FAILED}},
        ]
    }
    return contract, script


def _coding_multi(task: Task) -> dict[str, Any]:
    plan = task.plan
    tests = [path for path in plan["read"] if path in task.oracle["protect"]] or plan["read"]
    code = [path for path in plan["read"] if path not in tests] or plan["read"]
    string = {"type": "string"}
    code_reader = _reader(
        "code",
        "Find where the code under test goes wrong, and why.",
        code,
        {"file": plan["edits"][0]["path"] if plan["edits"] else code[0], "cause": plan["cause"]},
        {
            "type": "object",
            "properties": {"file": string, "cause": string},
            "required": ["file", "cause"],
        },
    )
    tests_reader = _reader(
        "tests",
        "Say what the tests expect and how they are run.",
        tests,
        {"command": task.test_command, "files": tests},
        {
            "type": "object",
            "properties": {"command": string, "files": {"type": "array", "items": string}},
            "required": ["command"],
        },
    )
    test = task.test_command + " 2>&1"
    # The files to change must be read before they are edited (the file tools refuse otherwise).
    edited = list(dict.fromkeys([*code, *(edit["path"] for edit in plan["edits"])]))
    return {
        "turns": [
            {
                "text": "Two workers read in parallel: one the code, one the tests.",
                "tool_calls": [_call("delegate", tasks=[code_reader[0], tests_reader[0]])],
            },
            {
                "text": "Reading the files to change and running the tests myself.",
                "tool_calls": [*_reads(edited), _call("shell", command=test)],
            },
            *_fixing_turns(task, 3),
        ],
        "children": {"code": code_reader[1], "tests": tests_reader[1]},
    }


def _research_single(task: Task) -> dict[str, Any]:
    plan = task.plan
    return {
        "turns": [
            {"text": "Looking at the documents.", "tool_calls": [_call("list_files", depth=3)]},
            {"text": "Reading the relevant documents.", "tool_calls": _reads(plan["read"])},
            {
                "text": plan["explain"],
                "tool_calls": [_call("shell", command=plan["command"])],
            },
            {
                "text": "Answer, as the sandbox computed it from the documents:\n{output:3.1}",
                "on_error": {"text": "No answer: the command failed. {error}"},
            },
        ]
    }


def _research_multi(task: Task) -> dict[str, Any]:
    plan = task.plan
    paths = plan["read"]
    half = (len(paths) + 1) // 2
    groups = [group for group in (paths[:half], paths[half:]) if group]
    string = {"type": "string"}
    readers = [
        _reader(
            f"documents-{number}",
            f"Read these documents and say what they hold that bears on: {task.goal}",
            group,
            {"read": group, "summary": f"{len(group)} document(s) read."},
            {
                "type": "object",
                "properties": {"read": {"type": "array", "items": string}, "summary": string},
                "required": ["read"],
            },
        )
        for number, group in enumerate(groups, start=1)
    ]
    return {
        "turns": [
            {
                "text": "Workers read the documents in parallel.",
                "tool_calls": [_call("delegate", tasks=[contract for contract, _ in readers])],
            },
            {
                "text": plan["explain"],
                "tool_calls": [_call("shell", command=plan["command"])],
            },
            {
                "text": "Answer, as the sandbox computed it from the documents:\n{output:2.1}",
                "on_error": {"text": "No answer: the command failed. {error}"},
            },
        ],
        "children": {contract["name"]: script for (contract, script) in readers},
    }
