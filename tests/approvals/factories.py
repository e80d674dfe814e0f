"""Approvals and questions as real rows: a project, a mission, a run started by the kernel, and
the human wait that run opened (created directly, or by the run itself through a worker)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from approvals.models import Approval, Question
from kernel import programs, runs
from kernel.context import RunContext
from kernel.models import Run, Wait, WaitKind
from kernel.programs import Outcome
from missions.models import Mission, Project
from tools.base import arguments_hash

DIFF = """diff --git a/NOTES.md b/NOTES.md
index 3b18e51..a9c4f2e 100644
--- a/NOTES.md
+++ b/NOTES.md
@@ -1,3 +1,3 @@
 # Release notes
-Version 1.2
+Version 1.3
 Thanks to everyone."""


def asks(ctx: RunContext) -> Outcome:
    """Ask the owner what the input says (as `approvals.service` does); end with the answer."""
    waited = ctx.wait_human(ctx.input["question"], expires_in=timedelta(days=7))
    return Outcome(output=waited)


programs.PROGRAMS.add("test.approvals.asks", asks)


def make_mission(goal: str = "Publish the 1.3 release notes") -> Mission:
    project, _ = Project.objects.get_or_create(name="approvals tests")
    return Mission.objects.create(project=project, goal=goal)


def approval_request(
    mission: Mission,
    *,
    tool: str = "shell",
    arguments: dict[str, Any] | None = None,
    justification: str = "The tests pass; deploying publishes the notes.",
    preview: dict[str, Any] | None = None,
    risk: str = "external",
) -> dict[str, Any]:
    """An approval's question, shaped as `approvals.service.ask_approval` records it."""
    arguments = {"command": "make deploy"} if arguments is None else arguments
    return {
        "type": "approval",
        "tool": tool,
        "arguments": arguments,
        "args_hash": arguments_hash(tool, arguments),
        "risk": risk,
        "justification": justification,
        "preview": preview if preview is not None else {},
        "project_id": mission.project_id,
        "mission_id": mission.pk,
    }


def start_asking(question: dict[str, Any], *, mission: Mission | None = None) -> Run:
    """A run that will open a human wait with `question` when a worker executes it."""
    mission = mission or make_mission()
    return runs.start_run(
        account=mission, program="test.approvals.asks", input={"question": question}
    )


def open_wait(run: Run, question: dict[str, Any], *, due_in: timedelta) -> Wait:
    return Wait.objects.create(
        run=run, seq=1, kind=WaitKind.HUMAN, question=question, due_at=timezone.now() + due_in
    )


def make_approval(
    *, mission: Mission | None = None, due_in: timedelta = timedelta(days=7), **request: Any
) -> Approval:
    mission = mission or make_mission()
    question = approval_request(mission, **request)
    wait = open_wait(start_asking(question, mission=mission), question, due_in=due_in)
    return Approval.objects.get(pk=wait.pk)


def question_request(
    mission: Mission, *, text: str = "Which branch?", choices: list[str] | None = None
) -> dict[str, Any]:
    return {"type": "question", "text": text, "choices": choices or [], "mission_id": mission.pk}


def make_question(
    *,
    text: str = "Which branch should the notes go to?",
    choices: list[str] | None = None,
    due_in: timedelta = timedelta(days=7),
) -> Question:
    mission = make_mission()
    question = question_request(mission, text=text, choices=choices)
    wait = open_wait(start_asking(question, mission=mission), question, due_in=due_in)
    return Question.objects.get(pk=wait.pk)


def answer_of(wait_id: int) -> dict[str, Any]:
    """The answer recorded on a wait (a dict once settled by the owner)."""
    answer = Wait.objects.get(pk=wait_id).answer
    assert isinstance(answer, dict), answer
    return answer
