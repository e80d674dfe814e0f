"""The definition of done as criteria: command oracles run in the run's sandbox, a clean-context
evaluator judges the rest, and the stop hook lets a run end `done` only when every criterion
passes — else the model is told what is missing, and the run ends `partial`. Real worker, real
sandbox, a real project repository, the scripted model."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agentos.core import tokens
from kernel.models import Run, Step, StepKind
from kernel.worker import Worker
from missions import demo, verification
from missions.engine import spec
from missions.launch import create_mission
from missions.models import Mission, Project
from missions.timeline import entry
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.factories import Owner
from tests.live import crash_env
from tests.polling import wait_for
from tests.processes import stop
from tests.tools.test_demo_mission import start_worker
from tools import workspace

# Runs execute on a real worker (its own connections): those tests commit.
runs_work = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider can be called: missions run on the scripted model."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def project() -> Iterator[Project]:
    """A project whose repository the sandbox user can reach (the demo's: calc.py, tests)."""
    base = workspace.root() / "test-verification" / uuid.uuid4().hex[:8]
    repo = demo.create_repositories(base)
    yield Project.objects.create(name=f"p-{base.name}", repository=str(repo))
    shutil.rmtree(base, ignore_errors=True)


def command(ident: str, line: str) -> dict[str, Any]:
    return {"id": ident, "description": f"{ident} holds", "oracle": {"command": line}}


def judged(ident: str, description: str) -> dict[str, Any]:
    return {"id": ident, "description": description, "oracle": {"evaluator": True}}


def start(
    project: Project,
    criteria: list[dict[str, Any]],
    turns: list[dict[str, Any]],
    evaluator: list[dict[str, Any]] | None = None,
) -> Run:
    """A mission with these criteria, its worker (and evaluator) playing these turns."""
    script: dict[str, Any] = {"turns": turns}
    if evaluator is not None:
        script["children"] = {"evaluator": {"turns": evaluator}}
    _mission, run = create_mission(
        project=project, goal="Fix calc.", trigger="owner", script=script, criteria=criteria
    )
    return run


def work(run: Run) -> Run:
    Worker(lease_seconds=30).run_until_idle()
    run.refresh_from_db()
    return run


def out(run: Run) -> dict[str, Any]:
    assert isinstance(run.output, dict), (run.status, run.error)
    return run.output


def res(step: Step) -> dict[str, Any]:
    assert isinstance(step.result, dict), step.name
    return step.result


def verdicts(run: Run) -> list[tuple[str, Any]]:
    steps = Step.objects.filter(run=run, kind=StepKind.VERDICT).order_by("seq")
    return [(s.name, res(s).get("passes", res(s).get("refusal"))) for s in steps]


def shell(line: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "shell", "arguments": {"command": line}}]}


# --- command oracles --------------------------------------------------------------------------


@runs_work
def test_every_command_oracle_passing_ends_the_run_done(project: Project) -> None:
    run = start(
        project,
        [command("readme", "test -f README.md"), command("calc", "grep -q 'def ' calc.py")],
        [{"text": "Done."}],
    )
    assert run.input["stop_hook"] == "definition_of_done"
    assert "- calc: calc holds (checked by running `grep -q 'def ' calc.py`" in "\n".join(
        run.input["constraints"]
    )

    run = work(run)

    assert run.status == "done", (run.error, run.output)
    assert [c["passes"] for c in out(run)["criteria"]] == [True, True]
    assert verdicts(run) == [
        ("oracle readme", True),
        ("oracle calc", True),
        ("definition_of_done", None),
    ]
    oracle = Step.objects.get(run=run, name="oracle calc")
    assert (oracle.effect, res(oracle)["exit_code"]) == ("read", 0)
    assert res(oracle)["evidence"].startswith("$ grep -q 'def ' calc.py\n")
    # The owner reads each verdict with its evidence on the run's page.
    assert entry(oracle).summary.startswith("Criterion calc passes: $ grep -q 'def ' calc.py")


@runs_work
def test_a_failing_command_is_told_to_the_model_then_the_run_ends_partial(
    project: Project,
) -> None:
    failing = "echo 'FAILED test_average: 2 != 3'; exit 1"
    run = start(
        project,
        [command("readme", "test -f README.md"), command("tests", failing)],
        [{"text": "Done."}, {"echo_context": True}, {"text": "Done, really."}],
    )

    run = work(run)

    assert run.status == "partial", (run.error, run.output)
    assert [m["id"] for m in out(run)["missing"]] == ["tests"]
    assert "FAILED test_average: 2 != 3" in out(run)["missing"][0]["evidence"]
    assert [c["passes"] for c in out(run)["criteria"]] == [True, False]
    assert out(run)["refused_by_stop_hook"].startswith("1 criterion(s)")
    # The model saw which criterion failed, with the command's output (as data) and exit code.
    seen = Step.objects.filter(run=run, kind=StepKind.MODEL_CALL).order_by("seq")[1]
    told = json.loads(res(seen)["text"].split("] ", 1)[1])["items"][-1]["text"]
    assert told.startswith(spec.STOP_HOOK_PREFIX + "1 criterion(s) of the definition of done")
    assert "- tests (tests holds):" in told
    assert "FAILED test_average: 2 != 3" in told
    assert "[exit code 1]" in told
    assert 'source="criterion tests" trust="tool"' in told
    # Three wishes to end, three checks of every command: then partial, not blocked.
    assert [name for name, _ in verdicts(run)].count("oracle tests") == spec.MAX_STOP_REFUSALS


@runs_work
def test_the_model_may_go_on_and_finish_once_the_criterion_passes(project: Project) -> None:
    run = start(
        project,
        [command("fixed", "grep -q fixed NOTES.txt")],
        [{"text": "Done."}, shell("echo fixed > NOTES.txt"), {"text": "Done now."}],
    )

    run = work(run)

    assert run.status == "done", (run.error, run.output)
    found = verdicts(run)
    assert [name for name, _ in found] == [
        "oracle fixed",
        "definition_of_done",
        "oracle fixed",
        "definition_of_done",
    ]
    assert found[0][1] is False
    assert found[1][1].startswith("1 criterion(s)")
    assert found[2][1] is True
    assert found[3][1] is None
    assert out(run)["criteria"][0]["passes"] is True


# --- the clean-context evaluator --------------------------------------------------------------


@runs_work
def test_the_evaluator_sees_criteria_and_artifacts_only_and_cites_evidence(
    project: Project,
) -> None:
    verdict = {"verdicts": [{"id": "notes", "passes": True, "evidence": "NOTES.txt: +fixed"}]}
    run = start(
        project,
        [command("readme", "test -f README.md"), judged("notes", "NOTES.txt says fixed.")],
        [
            {**shell("echo fixed > NOTES.txt"), "reasoning": "SECRET-PLAN-42"},
            {"text": "I wrote NOTES.txt."},
        ],
        evaluator=[{"text": json.dumps(verdict)}],
    )

    run = work(run)

    assert run.status == "done", (run.error, run.output)
    child = Run.objects.get(parent=run)
    assert (child.status, child.input["role"], child.input["tools"]) == ("done", "evaluator", [])
    goal = child.input["goal"]
    assert "- notes: NOTES.txt says fixed." in goal
    assert "I wrote NOTES.txt." in goal  # the worker's final answer, as data
    assert "+fixed" in goal  # its changes against the base
    assert "SECRET-PLAN-42" not in json.dumps(child.input)  # never its reasoning
    assert "- readme" not in goal  # only the criteria it judges
    step = Step.objects.get(run=run, name="evaluator notes")
    assert step.kind == StepKind.VERDICT
    assert step.result == {
        "criterion": "notes",
        "passes": True,
        "evidence": "NOTES.txt: +fixed",
        "evaluator_run": child.pk,
    }
    assert [c["passes"] for c in out(run)["criteria"]] == [True, True]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"verdicts": [{"id": "notes", "passes": True}]}, "cited no evidence"),
        ({"verdicts": [{"id": "notes", "passes": True, "evidence": "  "}]}, "cited no evidence"),
        ({"verdicts": [{"id": "other", "passes": True, "evidence": "x"}]}, "no verdict on this"),
        ("Looks good to me.", "not a JSON verdict"),
    ],
)
@runs_work
def test_a_verdict_without_evidence_does_not_pass(project: Project, answer: Any, why: str) -> None:
    run = start(
        project,
        [judged("notes", "NOTES.txt says fixed.")],
        [{"text": "Done."}] * spec.MAX_STOP_REFUSALS,
        evaluator=[{"text": answer if isinstance(answer, str) else json.dumps(answer)}],
    )

    run = work(run)

    assert run.status == "partial", (run.error, run.output)
    assert why in out(run)["missing"][0]["evidence"]
    # Each wish to end asked a fresh evaluator, in a clean context.
    assert Run.objects.filter(parent=run, status="done").count() == spec.MAX_STOP_REFUSALS


@runs_work
def test_the_evaluator_is_not_asked_while_a_command_fails(project: Project) -> None:
    run = start(
        project,
        [command("tests", "exit 3"), judged("notes", "NOTES.txt says fixed.")],
        [{"text": "Done."}] * spec.MAX_STOP_REFUSALS,
        evaluator=[{"text": "unused"}],
    )

    run = work(run)

    assert run.status == "partial"
    assert not Run.objects.filter(parent=run).exists()
    assert "command criteria must pass first" in out(run)["missing"][1]["evidence"]


@pytest.mark.django_db
def test_the_evaluator_is_on_the_other_provider_when_both_can_be_called(
    monkeypatch: pytest.MonkeyPatch, seeded_catalog: None
) -> None:
    mission = Mission.objects.create(project=Project.objects.create(name="p"), goal="g")
    worker = spec.Spec(goal="g", provider="openai", model="gpt-6.1-sol")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    # Only the worker's provider: a clean context on its own model.
    assert verification.evaluator_route(mission.pk, worker).provider == "openai"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    assert verification.evaluator_route(mission.pk, worker).provider == "anthropic"


# --- criteria ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("criteria", "message"),
    [
        ([], "The criteria are a non-empty list of criteria."),
        ("tests pass", "The criteria are a non-empty list of criteria."),
        (["tests pass"], "Criterion 1 is not an object with id, description and oracle."),
        (
            [{"description": "d", "oracle": {"evaluator": True}}],
            "Criterion 1 needs an id: 1 to 64 letters, digits, '_', '.' or '-', starting with a"
            " letter or digit.",
        ),
        (
            [command("a", "true"), command("a", "false")],
            "Criterion 2 (a): the id is used twice; ids are unique.",
        ),
        (
            [{"id": "a", "description": " ", "oracle": {"evaluator": True}}],
            "Criterion 1 (a) needs a non-empty description.",
        ),
        (
            [{"id": "a", "description": "d", "oracle": {"command": "true", "evaluator": True}}],
            'Criterion 1 (a): its oracle is exactly one of {"command": "<shell command>"} or'
            ' {"evaluator": true}.',
        ),
        (
            [{"id": "a", "description": "d", "oracle": {}}],
            'Criterion 1 (a): its oracle is exactly one of {"command": "<shell command>"} or'
            ' {"evaluator": true}.',
        ),
        (
            [{"id": "a", "description": "d", "oracle": {"evaluator": "yes"}}],
            'Criterion 1 (a): an evaluator oracle is {"evaluator": true}.',
        ),
        (
            [{"id": "a", "description": "d", "oracle": {"command": " "}}],
            "Criterion 1 (a): its command is a non-empty shell command.",
        ),
        (
            [{**command("a", "true"), "passes": True}],
            "Criterion 1 (a): passes is false when the criteria are written, before the work.",
        ),
        (
            [{**command("a", "true"), "weight": 2}],
            "Criterion 1 has unknown field(s) weight; fields: id, description, oracle, passes.",
        ),
    ],
)
def test_malformed_criteria_are_refused_precisely(criteria: Any, message: str) -> None:
    with pytest.raises(verification.CriteriaError) as refused:
        verification.validate(criteria)
    assert (refused.value.message, refused.value.code) == (message, "invalid_criteria")


def test_only_passes_may_change() -> None:
    written = verification.validate([command("a", "true"), judged("b", "B holds.")])

    passed = [{**written[0], "passes": True}, written[1]]
    assert verification.update(written, passed) == passed
    for proposed, message in [
        (
            [{**written[0], "description": "easier"}, written[1]],
            "Criterion a: its description cannot change; only passes changes.",
        ),
        (
            [{**written[0], "oracle": {"command": "true || true"}}, written[1]],
            "Criterion a: its oracle cannot change; only passes changes.",
        ),
        (
            [written[1], written[0]],
            "Criterion a: its id cannot change; only passes changes.",
        ),
        (
            [written[0]],
            "Criteria cannot be added or removed once written; only passes changes.",
        ),
        (
            [written[0], {**written[1], "note": "x"}],
            "Criterion b: its fields cannot change; only passes changes.",
        ),
        (
            [written[0], {**written[1], "passes": "yes"}],
            "Criterion b: passes is true or false.",
        ),
    ]:
        with pytest.raises(verification.CriteriaError) as refused:
            verification.update(written, proposed)
        assert refused.value.message == message
    assert written[0]["passes"] is False  # nothing changed in place


# --- the API ----------------------------------------------------------------------------------


@pytest.fixture
def api(client: Client, owner: Owner) -> Api:
    return Api(client, tokens.create_token(owner=owner.user, name="tests").secret)


@pytest.mark.parametrize(
    ("criteria", "message"),
    [
        ([], "The criteria are a non-empty list of criteria."),
        (
            [command("tests", "pytest"), command("tests", "ruff check")],
            "Criterion 2 (tests): the id is used twice; ids are unique.",
        ),
        (
            [{"id": "docs", "description": "", "oracle": {"evaluator": True}}],
            "Criterion 1 (docs) needs a non-empty description.",
        ),
    ],
)
@pytest.mark.django_db
def test_the_api_refuses_malformed_criteria_with_400(
    api: Api, project: Project, criteria: Any, message: str
) -> None:
    response = api.post(
        "/missions", {"project_id": project.pk, "goal": "Fix calc.", "criteria": criteria}
    )

    assert response.status_code == 400
    assert error_of(response) == {"code": "invalid_criteria", "message": message, "details": None}
    assert not Mission.objects.exists()


@pytest.mark.django_db
def test_the_api_refuses_a_command_criterion_without_a_repository(api: Api) -> None:
    bare = Project.objects.create(name="no repository")
    response = api.post(
        "/missions",
        {"project_id": bare.pk, "goal": "g", "criteria": [command("tests", "pytest")]},
    )

    assert response.status_code == 400
    assert "this project has none" in str(error_of(response)["message"])


@pytest.mark.django_db
def test_the_api_starts_a_mission_held_to_its_criteria(
    api: Api, project: Project, monkeypatch: pytest.MonkeyPatch, seeded_catalog: None
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    criteria = [command("tests", "python3 -m pytest -q"), judged("docs", "README explains it.")]

    response = api.post(
        "/missions", {"project_id": project.pk, "goal": "Fix calc.", "criteria": criteria}
    )

    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["run_id"])
    assert run.input["criteria"] == [{**c, "passes": False} for c in criteria]
    assert run.input["stop_hook"] == "definition_of_done"
    # Kept with the mission, as written: what the API shows, and what a relaunch is held to.
    mission = api.get(f"/missions/{response.json()['id']}").json()
    assert mission["criteria"] == run.input["criteria"]
    assert Mission.objects.get().criteria == run.input["criteria"]


# --- durability -------------------------------------------------------------------------------


@runs_work
def test_a_kill_between_oracles_does_not_run_a_recorded_oracle_again(
    project: Project, tmp_path: Path
) -> None:
    run = start(
        project,
        [command("first", "echo ran >> first.log"), command("second", "echo ran >> second.log")],
        [{"text": "Done."}],
    )
    # Steps: 1 window, 2 workspace, 3 resume routine, 4 model, 5 oracle first, 6 oracle second,
    # 7 summary. The first oracle's result is committed with the second's intent; the kill comes
    # right after.
    target = {"run": run.pk, "point": "after_intent_commit", "seq": 6}
    env = crash_env(tmp_path, [target], AGENTOS_WORKSPACES_DIR=str(workspace.root()))
    killed = start_worker(env)
    assert killed.wait(timeout=90) == -9
    assert res(Step.objects.get(run=run, seq=5))["passes"] is True
    assert Step.objects.get(run=run, seq=6).result is None
    worker = start_worker(env)
    try:
        wait_for(
            lambda: Run.objects.get(pk=run.pk).is_terminal,
            timeout=90,
            message="the run to end",
            interval=0.05,
        )
    finally:
        stop(worker)

    run.refresh_from_db()
    assert run.status == "done", (run.error, run.output)
    top = Path(run.workspace)
    assert (top / "first.log").read_text() == "ran\n"  # replayed from the journal, not rerun
    assert (top / "second.log").read_text() == "ran\n"
    assert [s.executions for s in Step.objects.filter(run=run, name__startswith="oracle ")] == [
        1,
        1,
    ]


@pytest.mark.django_db  # the module's catalog fixture
def test_checks_typed_one_per_line_become_criteria_and_read_back() -> None:
    text = "$ python3 -m unittest\n\n  The README says how to run it.  \n$make lint"

    criteria = verification.from_lines(text)

    assert criteria == [
        {
            "id": "c1",
            "description": "`python3 -m unittest` succeeds",
            "oracle": {"command": "python3 -m unittest"},
            "passes": False,
        },
        {
            "id": "c2",
            "description": "The README says how to run it.",
            "oracle": {"evaluator": True},
            "passes": False,
        },
        {
            "id": "c3",
            "description": "`make lint` succeeds",
            "oracle": {"command": "make lint"},
            "passes": False,
        },
    ]
    assert verification.validate(criteria) == criteria
    assert verification.to_lines(criteria) == (
        "$ python3 -m unittest\nThe README says how to run it.\n$ make lint"
    )
    assert verification.from_lines(" \n ") == []
    with pytest.raises(verification.CriteriaError, match=r"Criterion 1 \(c1\)"):
        verification.validate(verification.from_lines("$"))
