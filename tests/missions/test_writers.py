"""Isolated writers through the real `delegate` tool: each writer works in a repository of its
own made from the parent's checkpoint, the parent merges their work with `merge_work`, and a
conflict comes back as an error that says to delegate a resolver."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.sandbox import for_level
from kernel import runs
from kernel.models import Run, Step, StepKind
from kernel.worker import Worker
from missions import demo
from missions.models import Mission, Project
from tools import workspace
from tools.builtin import CODING_TOOLS, MERGING_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"file": {"type": "string"}}, "required": ["file"]}


@pytest.fixture
def mission() -> Iterator[tuple[Mission, Path]]:
    base = workspace.root() / "test-writers" / uuid.uuid4().hex[:8]
    repo = demo.create_repositories(base)
    project = Project.objects.create(name=f"p-{base.name}", repository=str(repo))
    yield Mission.objects.create(project=project, goal="Split the work."), repo
    shutil.rmtree(base, ignore_errors=True)


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in pairs]}


def writer_task(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "objective": f"Write {name}.txt and commit it.",
        "writes": True,
        "output_schema": SCHEMA,
        "done_criteria": [f"{name}.txt is committed"],
    }


def writer_script(name: str, command: str) -> dict[str, Any]:
    envelope = {
        "status": "done",
        "payload": {"file": f"{name}.txt"},
        "evidence": {"commands": [command], "tests": [], "sources": []},
    }
    return {
        "turns": [
            calls(("shell", {"command": command})),
            calls(("git_commit", {"message": f"writer {name}"})),
            {"text": json.dumps(envelope)},
        ]
    }


def start_parent(
    mission: Mission,
    repo: Path,
    writers: dict[str, str],
    after: list[dict[str, Any]],
    later: dict[str, dict[str, Any]] | None = None,
) -> tuple[Run, list[int]]:
    """A parent that commits a file, leaves a draft uncommitted, delegates to `writers` (name:
    their shell command), commits its draft, then plays `after` with the writers' run ids (the
    next ids after its own, in the order given — `later`'s writers, delegated in `after`, after
    them; checked once they exist)."""
    later = later or {}
    parent = runs.start_run(account=mission, program="agent", input={"goal": "placeholder"})
    ids = [parent.pk + offset for offset in range(1, len(writers) + len(later) + 1)]
    turns = [
        calls(
            ("write_file", {"path": "committed.txt", "content": "committed by the parent\n"}),
            ("git_commit", {"message": "parent: committed"}),
        ),
        calls(("write_file", {"path": "draft.txt", "content": "not committed yet\n"})),
        calls(("delegate", {"tasks": [writer_task(name) for name in writers]})),
        calls(("git_commit", {"message": "parent: draft"})),
        *(fill(turn, ids) for turn in after),
    ]
    Run.objects.filter(pk=parent.pk).update(
        input={
            "goal": "Split the work between writers and merge it.",
            "provider": "scripted",
            "model": "scripted",
            "tools": [*CODING_TOOLS, *MERGING_TOOLS, "delegate"],
            "script": {
                "turns": turns,
                "children": {
                    **{name: writer_script(name, command) for name, command in writers.items()},
                    **{name: fill(script, ids) for name, script in later.items()},
                },
            },
            "repository": str(repo),
            "checkpoints": True,
            "data_framing": True,
        }
    )
    return parent, ids


def fill(turn: dict[str, Any], ids: list[int]) -> dict[str, Any]:
    """`turn` (or a script) with each `{"run": "#N"}` argument replaced by the N-th writer's
    run id."""
    text = json.dumps(turn)
    for number, run_id in enumerate(ids, start=1):
        text = text.replace(f'"#{number}"', str(run_id))
    filled: dict[str, Any] = json.loads(text)
    return filled


def in_worktree(run: Run, *args: str) -> str:
    done = for_level(1).run(
        ["git", *args], workdir=Path(run.workspace), run_id=run.pk, stderr_apart=True
    )
    assert done.exit_code == 0, done.errors
    return done.output.strip()


def results(run: Run, name: str) -> list[dict[str, Any]]:
    steps = Step.objects.filter(run=run, kind=StepKind.TOOL_CALL, name=name).order_by("seq")
    return [dict(step.result or {}) for step in steps]


def test_two_delegated_writers_are_merged_into_the_parent(mission: tuple[Mission, Path]) -> None:
    parent, (a, b) = start_parent(
        *mission,
        {"a": "echo 'written by a' > a.txt", "b": "echo 'written by b' > b.txt"},
        [
            calls(("merge_work", {"run": "#1"})),
            calls(("merge_work", {"run": "#2"})),
            {"text": "Merged both."},
        ],
    )

    Worker(lease_seconds=30).run_until_idle()

    parent.refresh_from_db()
    assert parent.status == "done", parent.error
    assert sorted(Run.objects.filter(parent=parent).values_list("pk", flat=True)) == [a, b]
    for pk in (a, b):
        child = Run.objects.get(pk=pk)
        assert child.status == "done", child.error
        assert Path(child.workspace).name == f"run-{pk}"
        # Made from the parent's checkpoint: its commits, and its uncommitted draft.
        assert (Path(child.workspace) / "draft.txt").read_text() == "not committed yet\n"
        assert in_worktree(child, "log", "--format=%s", "-n2").splitlines()[1] == (
            "parent: committed"
        )
    merged = [result["output"] for result in results(parent, "merge_work")]
    assert [text.split(":")[0] for text in merged] == [
        f"Merged run {a} into this workspace",
        f"Merged run {b} into this workspace",
    ], merged
    top = Path(parent.workspace)
    assert (top / "a.txt").read_text() == "written by a\n"
    assert (top / "b.txt").read_text() == "written by b\n"
    assert (top / "draft.txt").read_text() == "not committed yet\n"
    assert in_worktree(parent, "status", "--porcelain") == ""


def test_writers_that_conflict_are_handed_back_to_be_resolved(
    mission: tuple[Mission, Path],
) -> None:
    parent, (a, b) = start_parent(
        *mission,
        {"a": "echo 'says a' > same.txt", "b": "echo 'says b' > same.txt"},
        [
            calls(("merge_work", {"run": "#1"})),
            calls(("merge_work", {"run": "#2"})),
            {"text": "Stopped at a conflict.", "on_error": {"text": "Conflict: {error}"}},
        ],
    )

    Worker(lease_seconds=30).run_until_idle()

    parent.refresh_from_db()
    assert parent.status == "done", parent.error
    first, second = results(parent, "merge_work")
    assert first["output"].startswith(f"Merged run {a} into this workspace"), first
    assert second["is_error"] is True
    assert f"Merge conflict: run {b}'s work and this workspace" in second["output"]
    assert "- same.txt" in second["output"]
    assert "delegate a writer" in second["output"]
    assert (Path(parent.workspace) / "same.txt").read_text() == "says a\n"
    assert in_worktree(parent, "status", "--porcelain") == ""
    assert isinstance(parent.output, dict)
    assert str(parent.output["answer"]).count("Merge conflict") == 1


def test_a_resolver_merges_its_conflicting_sibling_and_the_parent_merges_the_resolver(
    mission: tuple[Mission, Path],
) -> None:
    envelope = {
        "status": "done",
        "payload": {"file": "same.txt"},
        "evidence": {"commands": [], "tests": [], "sources": []},
    }
    resolver = {
        "turns": [
            calls(("merge_work", {"run": "#2"})),
            calls(("shell", {"command": "printf 'says a\\nsays b\\n' > same.txt"})),
            calls(("git_commit", {"message": "resolve: keep both"})),
            {"text": json.dumps(envelope)},
        ]
    }
    parent, (a, b, r) = start_parent(
        *mission,
        {"a": "echo 'says a' > same.txt", "b": "echo 'says b' > same.txt"},
        [
            calls(("merge_work", {"run": "#1"})),
            calls(("merge_work", {"run": "#2"})),
            calls(("delegate", {"tasks": [writer_task("r")]})),
            calls(("merge_work", {"run": "#3"})),
            calls(("merge_work", {"run": "#2"})),
            {"text": "Merged, conflict resolved."},
        ],
        later={"r": resolver},
    )

    Worker(lease_seconds=30).run_until_idle()

    parent.refresh_from_db()
    assert parent.status == "done", parent.error
    resolving = Run.objects.get(pk=r)
    assert (resolving.parent_id, resolving.status) == (parent.pk, "done"), resolving.error
    (kept,) = results(resolving, "merge_work")
    assert kept["is_error"] is False
    assert kept["output"].startswith(f"Merging run {b} stopped at conflicts"), kept
    assert "- same.txt" in kept["output"]
    merged = [result["output"] for result in results(parent, "merge_work")]
    assert merged[0].startswith(f"Merged run {a} into this workspace"), merged
    assert "Merge conflict" in merged[1]
    assert merged[2].startswith(f"Merged run {r} into this workspace"), merged
    assert merged[3].startswith(f"Run {b}'s work is already in this workspace"), merged
    top = Path(parent.workspace)
    assert (top / "same.txt").read_text() == "says a\nsays b\n"
    assert in_worktree(parent, "status", "--porcelain") == ""
    # b's own commit is in the parent's history, through the resolver's merge.
    subjects = in_worktree(parent, "log", "--format=%s").splitlines()
    assert "writer b" in subjects
    assert "resolve: keep both" in subjects
