"""The supervisor scenario (`missions.proving.scenarios`), end to end: a mission created with
criteria whose supervisor plans in the ledger, fans out three readers and two writers, merges the
writers' work and ends `done` once the tests pass in the sandbox and the evaluator agrees —
or `partial`, with what is missing, when a criterion fails. Real worker, real sandboxes, a real
repository, the scripted model."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.models import Run, Step, StepKind
from kernel.worker import Worker
from missions.models import PlanItem, Project
from missions.proving import scenarios
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def project() -> Iterator[Project]:
    base = workspace.root() / "test-supervisor" / uuid.uuid4().hex[:8]
    repo = scenarios.create_repository(base)
    yield Project.objects.create(name=f"p-{base.name}", repository=str(repo))
    shutil.rmtree(base, ignore_errors=True)


def result(step: Step) -> dict[str, Any]:
    assert isinstance(step.result, dict), step.name
    return step.result


def test_a_supervisor_fans_out_readers_and_writers_merges_and_ends_done(
    project: Project,
) -> None:
    mission, root = scenarios.launch_mission(project, trigger="owner")

    Worker(lease_seconds=30).run_until_idle()

    facts = scenarios.observe(root)
    assert facts.status == "done", (root.error, facts)
    # Five sub-agents, each ended done with its own envelope.
    outcomes = {name: child[1:] for name, child in facts.children.items()}
    assert outcomes == dict.fromkeys(scenarios.CHILDREN, ("done", "done"))
    children = {name: Run.objects.get(pk=pk) for name, (pk, _, _) in facts.children.items()}
    readers = [children[name] for name in scenarios.READERS]
    writers = [children[name] for name in scenarios.WRITERS]
    # The readers were started together: none had ended when the last one was made.
    ended = min(reader.finished_at for reader in readers if reader.finished_at)
    assert all(reader.created_at < ended for reader in readers)
    assert all(not reader.input["contract"]["writes"] for reader in readers)
    assert all("shell" not in reader.input["tools"] for reader in readers)
    # Each writer worked in a worktree of its own, made from the same checkpoint of the root.
    bases = {str(w.input["contract"]["base_checkpoint"]["tree"]) for w in writers}
    assert len(bases) == 1
    assert {Path(w.workspace).name for w in writers} == {f"run-{w.pk}" for w in writers}
    # Two merge commits in the supervisor's worktree, one per writer.
    assert sorted(facts.merges) == sorted(f"{scenarios.TRAILER}{w.pk}" for w in writers)
    assert facts.files == {"prices.py": scenarios.PRICES_FIXED, "text.py": scenarios.TEXT_FIXED}
    subjects = scenarios.git(root, "log", "--format=%s").splitlines()
    assert {"Fix prices.py", "Fix text.py"} <= set(subjects)
    # The definition of done: the tests ran in the sandbox, the evaluator cited its evidence.
    assert facts.criteria == {"tests": True, "reviewed": True}
    assert len(facts.evaluators) == 1
    assert facts.spawned == 6
    oracle = result(Step.objects.get(run=root, name="oracle tests"))
    assert oracle["exit_code"] == 0
    assert "OK" in oracle["evidence"]
    verdict = result(Step.objects.get(run=root, kind=StepKind.VERDICT, name="evaluator reviewed"))
    assert verdict["passes"] is True
    assert "sum(prices)" in verdict["evidence"]
    # The ledger: every item done with its proof; each writer closed its own item.
    items = {item.key: item for item in PlanItem.objects.filter(mission=mission)}
    assert {key: item.status for key, item in items.items()} == dict.fromkeys(
        [*scenarios.CHILDREN, "merge", "verify"], "done"
    )
    for writer in writers:
        item = items[writer.input["contract"]["name"]]
        assert item.updated_by_id == writer.pk
        assert item.proof["commands"] == [scenarios.WRITERS[item.key][3]]
    # Every token of the mission's runs is charged to its root.
    own, everyone = facts.tokens
    assert own == everyone > 0


def test_a_criterion_the_work_does_not_meet_keeps_the_mission_partial(
    project: Project,
) -> None:
    _mission, root = scenarios.launch_mission(project, failing=True, trigger="owner")

    Worker(lease_seconds=30).run_until_idle()

    facts = scenarios.observe(root)
    assert facts.status == "partial", (root.error, facts)
    # The work itself was done and merged: only the definition of done held the run back.
    outcomes = {name: child[1:] for name, child in facts.children.items()}
    assert outcomes == dict.fromkeys(scenarios.CHILDREN, ("done", "done"))
    assert len(facts.merges) == 2
    assert facts.criteria == {"tests": True, "reviewed": False, "changelog": False}
    assert facts.missing == ["reviewed", "changelog"]
    root.refresh_from_db()
    assert isinstance(root.output, dict)
    missing = {m["id"]: m["evidence"] for m in root.output["missing"]}
    assert missing["changelog"].startswith("$ test -s CHANGELOG.md")
    assert "command criteria must pass first" in missing["reviewed"]
    # The model was told what is missing twice, then the hook's third refusal ended the run.
    assert Step.objects.filter(run=root, name="oracle changelog").count() == 3
    assert facts.evaluators == []
