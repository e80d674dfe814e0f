"""Delegation: a parent hands tasks to sub-agents under contracts and reads back only their
result envelopes, as data — on the offline scripted model, through a real in-process worker."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Sum

from agentos.core import audit
from kernel import budgets, crashpoints, runs, scheduler
from kernel.models import Run, RunStatus, Step
from kernel.worker import Worker
from missions import contracts, delegation, demo, envelopes
from missions.engine.spec import STOP_HOOK_PREFIX, Spec
from missions.models import Mission, Project
from missions.providers import scripted
from tests.kernel.factories import make_mission
from tools import workspace

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
}


def task(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "objective": f"Count the {name}.",
        "output_schema": SCHEMA,
        "done_criteria": [f"the {name} are counted"],
        **extra,
    }


def envelope(count: Any, **extra: Any) -> dict[str, Any]:
    return {
        "status": "done",
        "payload": {"count": count},
        "evidence": {"commands": [], "tests": [], "sources": ["README.md"]},
        **extra,
    }


def answers(*texts: dict[str, Any]) -> dict[str, Any]:
    """A child's script: one turn per final answer it tries."""
    return {"turns": [{"text": json.dumps(text)} for text in texts]}


def parent_run(
    turns: list[dict[str, Any]],
    children: dict[str, Any],
    *,
    mission: Mission | None = None,
    tools: list[str] | None = None,
) -> Run:
    return runs.start_run(
        account=mission or make_mission(),
        program="agent",
        input={
            "goal": "Survey the project with helpers.",
            "provider": "scripted",
            "model": "scripted",
            "tools": tools if tools is not None else ["delegate", "noop", "read_artifact"],
            "script": {"turns": turns, "children": children},
            "data_framing": True,
        },
    )


def delegating(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {
        "text": "Delegating.",
        "tool_calls": [{"name": "delegate", "arguments": {"tasks": list(tasks)}}],
    }


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


def answer_of(run: Run) -> str:
    assert isinstance(run.output, dict)
    return str(run.output["answer"])


def said_last(run: Run) -> str:
    """The text of the run's last model call, as the model wrote it (its answer as the run's
    output is what the owner reads)."""
    last = Step.objects.filter(run=run, kind="model_call").order_by("-seq").first()
    assert last is not None
    assert isinstance(last.result, dict)
    return str(last.result["text"])


def tool_results(run: Run) -> list[dict[str, Any]]:
    return [
        dict(step.result or {})
        for step in Step.objects.filter(run=run, kind="tool_call", name="delegate").order_by("seq")
    ]


def test_a_parent_fans_out_three_readers_and_reads_their_envelopes_as_data() -> None:
    run = parent_run(
        [delegating(task("files"), task("tests"), task("todos")), {"echo_context": True}],
        {
            "files": answers(envelope(12)),
            "tests": answers(envelope(3)),
            "todos": answers(envelope(0, open_questions=["is FIXME a TODO?"])),
        },
    )

    assert work() == ["waiting", "done", "done", "done", "done"]

    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    children = list(Run.objects.filter(parent=run).order_by("pk"))
    assert [child.status for child in children] == ["done"] * 3
    assert all(child.depth == 1 for child in children)
    # One journaled spawn step per child, then one durable join.
    kinds = list(Step.objects.filter(run=run).order_by("seq").values_list("kind", "name"))
    assert kinds[2:8] == [
        ("checkpoint", "delegate-plan"),
        ("spawn", "agent"),
        ("spawn", "agent"),
        ("spawn", "agent"),
        ("join", "join"),
        ("tool_call", "delegate"),
    ]
    (result,) = tool_results(run)
    assert result["is_error"] is False
    seen = json.loads(result["output"])
    assert [(e["name"], e["run"], e["status"], e["payload"]) for e in seen] == [
        ("files", children[0].pk, "done", {"count": 12}),
        ("tests", children[1].pk, "done", {"count": 3}),
        ("todos", children[2].pk, "done", {"count": 0}),
    ]
    assert seen[2]["open_questions"] == ["is FIXME a TODO?"]
    assert seen[0]["evidence"] == {"commands": [], "tests": [], "sources": ["README.md"]}
    # What the parent's model read: the envelopes inside a data block, not as its instructions.
    context = json.loads(said_last(run).removeprefix(scripted.LABEL))
    (given,) = [item["output"] for item in context["items"] if item.get("role") == "tool"]
    block = re.fullmatch(
        r'<data-([0-9a-f]{16}) source="tool delegate" trust="tool">\n(.*)\n</data-\1>',
        given,
        re.DOTALL,
    )
    assert block is not None, given[:200]
    assert json.loads(block.group(2)) == seen


def test_an_executor_consults_the_planners_model_as_an_advisor() -> None:
    advice = {"status": "done", "payload": {"advice": "Bisect between v1 and v2."}}
    run = parent_run(
        [
            {
                "text": "Asking.",
                "tool_calls": [
                    {
                        "name": "consult_advisor",
                        "arguments": {"question": "Where did the bug come in?"},
                    }
                ],
            },
            {"text": "Advised: {output:1.1}"},
        ],
        {"advisor": answers(advice)},
        tools=["consult_advisor", "delegate", "noop", "read_artifact"],
    )

    assert work() == ["waiting", "done", "done"]

    run.refresh_from_db()
    (advisor,) = Run.objects.filter(parent=run)
    assert advisor.status == RunStatus.DONE
    contract = advisor.input["contract"]
    assert (advisor.input["role"], contract["role"]) == ("planner", "planner")
    assert "Where did the bug come in?" in contract["objective"]
    assert contract["output_schema"] == delegation.ADVICE_SCHEMA
    # Read-only, and it can neither delegate nor consult in turn.
    assert advisor.input["tools"] == ["noop", "read_artifact"]
    assert "Bisect between v1 and v2." in answer_of(run)


def test_a_child_s_spec_is_built_from_its_contract() -> None:
    run = parent_run(
        [
            delegating(
                task(
                    "files",
                    role="planner",
                    boundaries=["do not open vendored code"],
                    context=["src/app.py"],
                    effort="low",
                    budget={"tokens": 5000, "dollars": 0.5, "turns": 4, "seconds": 600},
                )
            ),
            {"text": "Thanks."},
        ],
        {"files": answers(envelope(1))},
    )

    assert work() == ["waiting", "done", "done"]

    child = Run.objects.get(parent=run)
    spec = Spec.from_input(child.input)
    assert (spec.provider, spec.role, spec.effort, spec.max_turns) == (
        "scripted",
        "planner",
        "low",
        4,
    )
    assert spec.stop_hook == "envelope"
    assert spec.tools == ["noop", "read_artifact"]  # the parent's read tools, never delegate
    assert spec.script == answers(envelope(1))
    assert spec.data_framing is True
    assert spec.criteria == [
        {
            "id": "c1",
            "description": "the files are counted",
            "oracle": {"evaluator": True},
            "passes": False,
        }
    ]
    assert spec.contract is not None
    assert spec.contract["name"] == "files"
    assert spec.contract["parent"] == run.pk
    assert spec.contract["output_schema"] == SCHEMA
    for text in (
        "Count the files.",
        "do not open vendored code",
        "src/app.py",
        "c1: the files are counted",
        '"required": ["count"]',
    ):
        assert text in spec.goal
    assert (child.max_tokens, child.max_usd_micros, child.max_seconds) == (5000, 500_000, 600)


def test_a_contract_without_done_criteria_is_refused_and_the_model_reads_why() -> None:
    run = parent_run(
        [
            delegating(task("files"), {**task("tests"), "done_criteria": []}),
            {"text": "Nothing to report.", "on_error": {"text": "Refused: {error}"}},
        ],
        {"files": answers(envelope(1)), "tests": answers(envelope(1))},
    )

    assert work() == ["done"]

    run.refresh_from_db()
    assert not Run.objects.filter(parent=run).exists()  # nothing was started
    (result,) = tool_results(run)
    assert result["is_error"] is True
    assert "task 'tests': no done criteria" in result["output"]
    assert "files" not in result["output"]
    # The model read the refusal (as data, as any tool's result) and answered from it; the
    # owner reads its answer without the data block's markup.
    assert said_last(run).startswith(scripted.LABEL + "Refused: <data-")
    assert answer_of(run) == scripted.LABEL + "Refused: " + result["output"]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"tools": ["noop", "shell"]}, "tools shell are not yours to give"),
        ({"role": "janitor"}, "'janitor' is not one of"),
        ({"budget": {"tokens": 0}}, "budget/tokens: 0 is less than or equal to the minimum of 0"),
        ({"output_schema": {"type": "nonsense"}}, "output_schema is not a valid JSON Schema"),
        ({"writes": True}, "writes: true needs a repository"),
        ({"sandbox_level": 3}, "sandbox_level 3 is not offered: no node can run a level-3 step"),
        (
            {"sandbox_level": 0},
            "sandbox_level 0 is below this run's (1): a sub-agent works at its parent's level",
        ),
        (
            {"context_mode": "artifact_only", "context": ["src/app.py"]},
            "artifact_only needs context to be artifact ids (sha256 hex), not src/app.py",
        ),
    ],
)
def test_a_contract_the_parent_cannot_give_is_refused_precisely(
    bad: dict[str, Any], says: str
) -> None:
    run = parent_run(
        [
            delegating(task("files", **bad)),
            {"text": "Fine.", "on_error": {"text": "Refused: {error}"}},
        ],
        {"files": answers(envelope(1))},
    )

    assert work() == ["done"]

    (result,) = tool_results(run)
    assert result["is_error"] is True
    assert says in result["output"]
    assert not Run.objects.filter(parent=run).exists()


def test_repeated_names_and_a_missing_child_script_are_refused() -> None:
    run = parent_run(
        [
            delegating(task("files"), task("files"), task("ghost")),
            {"text": "Fine.", "on_error": {"text": "Refused: {error}"}},
        ],
        {"files": answers(envelope(1))},
    )

    assert work() == ["done"]

    (result,) = tool_results(run)
    assert "task names must be unique within a call: files repeated" in result["output"]
    assert "task 'ghost': the offline scripted model has no script for it" in result["output"]


def test_a_writing_tool_is_refused_to_a_reader() -> None:
    run = parent_run(
        [
            delegating(task("files", tools=["write_file"])),
            {"text": "Fine.", "on_error": {"text": "{error}"}},
        ],
        {"files": answers(envelope(1))},
        tools=["delegate", "write_file"],
    )

    assert work() == ["done"]

    (result,) = tool_results(run)
    assert (
        "tools write_file change things, and a read-only worker gets only read tools"
        in result["output"]
    )


def test_an_envelope_that_fails_its_schema_is_refused_and_the_child_fixes_it() -> None:
    run = parent_run(
        [delegating(task("files")), {"text": "Thanks."}],
        {"files": answers(envelope("twelve"), envelope(12))},
    )

    assert work() == ["waiting", "done", "done"]

    child = Run.objects.get(parent=run)
    assert child.status == RunStatus.DONE
    verdicts = list(
        Step.objects.filter(run=child, kind="verdict")
        .order_by("seq")
        .values_list("result", flat=True)
    )
    assert len(verdicts) == 2
    refusal = dict(verdicts[0] or {})["refusal"]
    assert "payload/count: 'twelve' is not of type 'integer'" in refusal
    assert verdicts[1] == {"refusal": None}
    assert Step.objects.filter(run=child, kind="model_call").count() == 2
    (result,) = tool_results(run)
    assert json.loads(result["output"])[0]["payload"] == {"count": 12}


def test_the_child_is_told_why_its_envelope_was_refused() -> None:
    run = parent_run(
        [delegating(task("files")), {"text": "Thanks."}],
        {
            "files": {
                "turns": [{"text": json.dumps(envelope("twelve"))}, *[{"echo_context": True}] * 2]
            }
        },
    )

    work()

    child = Run.objects.get(parent=run)
    # The echo is no envelope: refused three times, the child ends blocked and its parent says so.
    assert child.status == RunStatus.BLOCKED
    first_echo = Step.objects.filter(run=child, kind="model_call").order_by("seq")[1].result
    assert isinstance(first_echo, dict)
    told = json.loads(first_echo["text"].removeprefix(scripted.LABEL))["items"][-1]["text"]
    assert told.startswith(STOP_HOOK_PREFIX + "your final answer must be your result envelope")
    assert "payload/count: 'twelve' is not of type 'integer'" in told
    (result,) = tool_results(run)
    (seen,) = json.loads(result["output"])
    assert seen["status"] == "blocked"
    assert seen["error"].startswith(f"child run {child.pk} is blocked: your final answer must be")


def test_a_child_over_its_token_budget_comes_back_budget_exhausted_with_a_clear_error() -> None:
    spender = {
        "turns": [
            {"text": json.dumps(envelope(1)), "usage": {"input_tokens": 1200, "output_tokens": 0}}
        ]
    }
    run = parent_run(
        [
            delegating(task("files", budget={"tokens": 1000}), task("tests")),
            # Only the task that ran out is given again, with more room.
            delegating(task("files", budget={"tokens": 5000})),
            {"text": "Thanks."},
        ],
        {"files": spender, "tests": answers(envelope(2))},
    )

    assert work() == ["waiting", "budget_exhausted", "done", "waiting", "done", "done"]

    run.refresh_from_db()
    spent, other, again = Run.objects.filter(parent=run).order_by("pk")
    first, second = tool_results(run)
    seen = json.loads(first["output"])
    assert seen[0]["status"] == "budget_exhausted"
    assert seen[0]["error"] == f"child run {spent.pk} exceeded its budget: 1200 of 1000 tokens"
    assert seen[0]["payload"] == {}
    assert seen[1]["status"] == "done"
    assert [(e["run"], e["status"]) for e in json.loads(second["output"])] == [(again.pk, "done")]
    # The sibling that succeeded ran once: nothing of it was replayed.
    assert Step.objects.filter(run=other, kind="model_call").count() == 1
    # The children's spend is debited to their parent too.
    own = Step.objects.filter(run=run).aggregate(tokens=Sum("input_tokens"))["tokens"]
    assert spent.input_tokens == 1200
    assert run.input_tokens == own + spent.input_tokens + other.input_tokens + again.input_tokens


def test_a_parent_killed_right_after_its_first_spawn_spawns_no_child_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    died: list[tuple[int, int]] = []

    def hit(point: str, *, run: int, seq: int = 0) -> None:
        # The worker dies once: the first child exists, the spawn step has no result yet.
        if (
            point == "after_effect_before_result"
            and not died
            and Step.objects.filter(run_id=run, seq=seq, kind="spawn").exists()
        ):
            died.append((run, seq))
            raise SystemExit("the worker died after the first spawn")

    monkeypatch.setattr(crashpoints, "hit", hit)
    run = parent_run(
        [delegating(task("files"), task("tests"), task("todos")), {"text": "Thanks."}],
        {
            "files": answers(envelope(1)),
            "tests": answers(envelope(2)),
            "todos": answers(envelope(3)),
        },
    )

    with pytest.raises(SystemExit):
        work()
    assert [spawner for spawner, _seq in died] == [run.pk]
    assert Run.objects.filter(parent=run).count() == 1
    first = Run.objects.get(parent=run)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)  # the dead worker's lease: over

    work()

    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    children = list(Run.objects.filter(parent=run).order_by("pk"))
    assert len(children) == 3
    assert children[0].pk == first.pk
    assert [child.spawned_by_seq for child in children] == [
        died[0][1],
        died[0][1] + 1,
        died[0][1] + 2,
    ]
    for child in children:
        assert Step.objects.filter(run=child, kind="model_call").count() == 1
    (result,) = tool_results(run)
    assert [e["payload"]["count"] for e in json.loads(result["output"])] == [1, 2, 3]


def test_a_run_at_the_deepest_level_is_told_it_cannot_delegate() -> None:
    mission = make_mission()
    ancestor = None
    for _depth in range(3):
        ancestor = runs.start_run(
            account=mission, program="agent", input={"goal": "g"}, parent=ancestor
        )
    assert ancestor is not None
    Run.objects.filter(account=mission).update(status=RunStatus.DONE, runnable_at=None)
    deepest = runs.start_run(
        account=mission,
        program="agent",
        parent=ancestor,
        input={
            "goal": "Go deeper.",
            "provider": "scripted",
            "model": "scripted",
            "tools": ["delegate"],
            "script": {
                "turns": [
                    delegating(task("files")),
                    {"text": "Fine.", "on_error": {"text": "{error}"}},
                ],
                "children": {"files": answers(envelope(1))},
            },
        },
    )
    assert deepest.depth == 3

    assert work() == ["done"]

    deepest.refresh_from_db()
    assert "this run is at depth 3 of its run tree, the deepest a run tree goes (3)" in answer_of(
        deepest
    )
    assert not Run.objects.filter(parent=deepest).exists()


def test_children_beyond_the_mission_s_concurrency_wait_in_the_queue() -> None:
    mission = make_mission(max_concurrent_runs=2)
    run = parent_run(
        [delegating(task("files"), task("tests"), task("todos")), {"text": "Thanks."}],
        {
            "files": answers(envelope(1)),
            "tests": answers(envelope(2)),
            "todos": answers(envelope(3)),
        },
        mission=mission,
    )
    worker = Worker(lease_seconds=30)
    assert worker.work_one() == "waiting"  # the parent, at its join

    claims = scheduler.claim_runs(worker="probe", lease_seconds=30, limit=10)

    assert len(claims) == 2  # the mission's cap; the third child waits, it does not fail
    queued = Run.objects.filter(parent=run, status=RunStatus.QUEUED)
    assert queued.count() == 1
    # The global cap holds them back the same way.
    Run.objects.filter(parent=run).update(lease_expires_at=None)
    budgets.set_global_caps({"max_running_runs": 1}, actor=audit.Actor())
    assert len(scheduler.claim_runs(worker="probe", lease_seconds=30, limit=10)) == 1
    budgets.set_global_caps(
        {"max_running_runs": budgets.GLOBAL_CAPS["max_running_runs"]}, actor=audit.Actor()
    )
    Run.objects.filter(parent=run).update(lease_expires_at=None)

    assert sorted(work()) == ["done"] * 4
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE


def test_the_envelope_hook_accepts_only_a_valid_envelope() -> None:
    contract = {"output_schema": SCHEMA}
    hook = envelopes.envelope_hook

    assert hook(json.dumps(envelope(3)), {"contract": contract}) is None
    assert (
        hook("Here it is:\n```json\n" + json.dumps(envelope(3)) + "\n```", {"contract": contract})
        is None
    )
    assert "it is not a JSON object" in (hook("All done!", {"contract": contract}) or "")
    assert "status: 'finished' is not one of" in (
        hook(json.dumps({**envelope(3), "status": "finished"}), {"contract": contract}) or ""
    )
    assert "a failed envelope needs an error" in (
        hook(json.dumps({"status": "failed", "payload": {}}), {"contract": contract}) or ""
    )
    assert (
        hook(
            json.dumps({"status": "failed", "payload": {}, "error": "no access"}),
            {"contract": contract},
        )
        is None
    )
    assert "(root): 'payload' is a required property" in (
        hook(json.dumps({"status": "done"}), {}) or ""
    )


def test_a_child_fails_over_to_the_other_provider_only_when_its_own_cannot_be_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    parent = Spec(goal="g", provider="anthropic", model="claude-opus-5-5")
    mission = make_mission()
    problems: list[str] = []

    route, failover = contracts._route(parent, mission, "evaluator", {}, problems)

    assert (route.provider, route.model) == ("anthropic", "claude-opus-5-5")
    assert failover == {
        "from": {"provider": "openai", "model": "gpt-6.1-sol"},
        "to": {"provider": "anthropic", "model": "claude-opus-5-5"},
        "reason": "openai cannot be called (no key or endpoint)",
    }
    route, failover = contracts._route(parent, mission, "planner", {}, problems)
    assert (route.provider, route.model, failover) == ("anthropic", "claude-fable-5-2", None)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    contracts._route(parent, mission, "planner", {}, problems)
    assert problems == [
        "role planner is routed to anthropic (claude-fable-5-2), which cannot be called (no key"
        " or endpoint), and no other provider can take it over"
    ]


@pytest.fixture
def repository() -> Iterator[Path]:
    """A project repository the sandbox user can reach (the demo's)."""
    base = workspace.root() / "test-delegation" / uuid.uuid4().hex[:8]
    yield demo.create_repositories(base)
    shutil.rmtree(base, ignore_errors=True)


def test_a_writer_starts_from_a_checkpoint_of_its_parent_s_files(repository: Path) -> None:
    project = Project.objects.create(name=f"p-{repository.parent.name}", repository=str(repository))
    mission = Mission.objects.create(project=project, goal="Fix calc with a helper.")
    writer = task("fixer", writes=True, tools=["read_file", "write_file"])
    run = runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": "Fix calc with a helper.",
            "provider": "scripted",
            "model": "scripted",
            "tools": ["delegate", "read_file", "write_file", "list_files"],
            "repository": str(repository),
            "checkpoints": True,
            "data_framing": True,
            "script": {
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "write_file",
                                "arguments": {"path": "PLAN.md", "content": "fix the mean\n"},
                            }
                        ]
                    },
                    delegating(writer),
                    {"text": "Thanks."},
                ],
                "children": {
                    "fixer": {
                        "turns": [
                            {
                                "tool_calls": [
                                    {"name": "read_file", "arguments": {"path": "PLAN.md"}}
                                ]
                            },
                            {"text": json.dumps(envelope(1))},
                        ]
                    }
                },
            },
        },
    )

    work()

    run.refresh_from_db()
    assert run.status == RunStatus.DONE, run.error
    child = Run.objects.get(parent=run)
    spec = Spec.from_input(child.input)
    assert spec.contract is not None
    base = spec.contract["base_checkpoint"]
    # The parent's worktree was checkpointed (a journaled step) right before the spawn.
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    spawn = next(step for step in steps if step.kind == "spawn")
    checkpoint = steps[spawn.seq - 2]
    assert (checkpoint.kind, checkpoint.name) == ("checkpoint", "workspace-checkpoint")
    assert base == {"run": run.pk, "workspace": run.workspace, **dict(checkpoint.result or {})}
    assert (spec.repository, spec.checkpoints, spec.tools) == (
        str(repository),
        True,
        ["read_file", "write_file"],
    )
    # The writer's own worktree holds the parent's uncommitted file.
    (read,) = Step.objects.filter(run=child, kind="tool_call", name="read_file")
    assert "fix the mean" in dict(read.result or {})["output"], read.result
    (seen,) = json.loads(tool_results(run)[0]["output"])
    assert seen["status"] == "done"
    assert child.workspace != run.workspace
