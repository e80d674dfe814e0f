"""A2A tasks as missions: what a task sent from outside becomes, and what its mission's runs say
of it in A2A's words (`agentos.a2a` serves them).

- A new task is a mission launched like any other (`missions.launch.create_mission`) in the
  project named `PROJECT` (made on first use; the owner gives it instructions, an environment,
  a repository as to any project). Its goal is ours (`GOAL`); the caller's text follows it in
  the first message as a data block of trust `web` (`launch.Brief`): never the system prompt,
  never the owner's words. The run is marked untrusted and outward from its start
  (`kernel.exposure`): it reads the caller's text and its answer goes back to the caller, so
  reading anything private then asks the owner.
- A question the run asks (`ask_owner`) is the task's `input-required`: the caller's next
  message on the task answers it, framed as data (the caller is not the owner). Approvals stay
  the owner's: the task is `working`, waiting for the owner's approval.
- Each task is a row (`A2ATask`): a restart loses none; only the token that sent it sees it.

Everything here is synchronous and reads the database: `agentos.a2a` calls it from a thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from a2a.types import (
    Artifact,
    InvalidParamsError,
    Message,
    Part,
    Role,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    TaskStatus,
    UnsupportedOperationError,
)
from django.db import transaction
from django.db.models import Q

from agentos.models import A2ATask
from approvals import service as approvals
from approvals.errors import ApprovalError
from kernel import exposure, runs
from kernel.exceptions import KernelError
from kernel.models import Run, RunStatus, Trust, Wait, WaitKind, WaitState
from missions.engine import framing
from missions.errors import MissionError
from missions.launch import Brief, create_mission
from missions.models import Project

PROJECT = "A2A"
GOAL = "Carry out the task an outside agent sent; its text follows as data."
SOURCE = "A2A caller"
TRIGGER = "a2a"
MAX_TEXT = 20_000
APPROVAL_NOTE = "waiting for the owner's approval"

FINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# Where a stream ends and a blocking send returns: the task is over, or waits for the caller.
SETTLED = FINAL | {TaskState.TASK_STATE_INPUT_REQUIRED}

# A run's end in A2A's words; `partial`, `blocked` and a spent budget did not do the task.
ENDS = {
    RunStatus.DONE: TaskState.TASK_STATE_COMPLETED,
    RunStatus.PARTIAL: TaskState.TASK_STATE_FAILED,
    RunStatus.BLOCKED: TaskState.TASK_STATE_FAILED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.BUDGET_EXHAUSTED: TaskState.TASK_STATE_FAILED,
    RunStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
}


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the API token (with `act`) it came with, and from where."""

    token_id: int
    name: str
    address: str | None = None

    @property
    def by(self) -> str:
        # Not "token:<name>": that is the owner acting (`kernel.runs._trust`); an A2A caller
        # holds an owner's token but speaks for an outside agent.
        return f"a2a:{self.name}"[:100]


@dataclass(frozen=True)
class Snapshot:
    """A task's state as its mission's runs say it now: `note` is the status message (a
    question's text...), `answer` the run's final answer (the artifact), if any."""

    state: TaskState
    note: str = ""
    answer: str | None = None

    @property
    def settled(self) -> bool:
        return self.state in SETTLED


def text_of(message: Message) -> str:
    """The text parts of a caller's message, joined; refused when there are none or too many."""
    texts = [part.text for part in message.parts if part.WhichOneof("content") == "text"]
    text = "\n\n".join(t for t in texts if t.strip())
    if not text:
        raise InvalidParamsError(
            message="The message needs a text part (other parts are not read)."
        )
    if len(text) > MAX_TEXT:
        raise InvalidParamsError(message=f"A message has at most {MAX_TEXT} characters of text.")
    return text


def receive(caller: Caller, message: Message) -> A2ATask:
    """A caller's message: a new task, or (naming a task) the answer to the question it asks."""
    text = text_of(message)
    if message.task_id:
        row = find(caller, message.task_id)
        answer(caller, row, text)
        return row
    return start(caller, text, context_id=message.context_id)


def start(caller: Caller, text: str, *, context_id: str = "") -> A2ATask:
    """Launch the task's mission, mark its run (untrusted, outward) and record the task, or
    none of it."""
    project, _created = Project.objects.get_or_create(
        name=PROJECT,
        defaults={"description": "Where tasks sent by outside agents (A2A) run as missions."},
    )
    try:
        with transaction.atomic():
            mission, run = create_mission(
                project=project,
                goal=GOAL,
                trigger=TRIGGER,
                brief=Brief(text=text, source=SOURCE, trust=Trust.WEB),
            )
            # Before its first step (the rule of two): the tree reads the caller's text, and
            # what it answers goes back to the caller — out, to whoever holds the token.
            exposure.mark(run.pk, {exposure.UNTRUSTED, exposure.OUTWARD}, seq=0, by="A2A task")
            return A2ATask.objects.create(
                context_id=(context_id or str(uuid.uuid4()))[:200],
                mission=mission,
                token_id=caller.token_id,
            )
    except MissionError as error:
        # No model can be called, a cap is invalid...: said as the owner would read it.
        raise UnsupportedOperationError(message=error.message) from None


def find(caller: Caller, task_id: str) -> A2ATask:
    """The caller's task `task_id`; another token's task is as unknown as a missing one."""
    try:
        key = uuid.UUID(task_id)
    except ValueError:
        raise TaskNotFoundError(message=f"No task {task_id[:80]!r}.") from None
    row = A2ATask.objects.filter(task_id=key, token_id=caller.token_id).first()
    if row is None:
        raise TaskNotFoundError(message=f"No task {task_id}.")
    return row


def root_run(row: A2ATask) -> Run:
    """The mission's root run (its latest, should there ever be more): the one the task follows."""
    run = Run.objects.filter(account_id=row.mission_id, parent__isnull=True).order_by("-pk").first()
    if run is None:  # made with its mission, in one transaction: never seen without one
        raise TaskNotFoundError(message=f"Task {row.task_id} has no run.")
    return run


def _open_waits(root: Run) -> list[Wait]:
    return list(
        Wait.objects.filter(
            Q(run_id=root.pk) | Q(run__root_id=root.pk),
            kind=WaitKind.HUMAN,
            state=WaitState.OPEN,
        ).order_by("pk")
    )


def _question(waits: list[Wait]) -> Wait | None:
    return next((w for w in waits if _kind(w) == "question"), None)


def _kind(wait: Wait) -> str:
    return str(wait.question.get("type", "")) if isinstance(wait.question, dict) else ""


def snapshot(row: A2ATask) -> Snapshot:
    """The task's state now, read from its runs and their open waits."""
    root = root_run(row)
    output = root.output if isinstance(root.output, dict) else {}
    answer = output.get("answer")
    # What the owner reads of the model's words: no data-block tags (`framing.unwrap`).
    found = framing.unwrap(answer) if isinstance(answer, str) and answer.strip() else None
    if root.is_terminal:
        state = ENDS.get(RunStatus(root.status), TaskState.TASK_STATE_FAILED)
        why = "" if state == TaskState.TASK_STATE_COMPLETED else _why(root, output)
        return Snapshot(state, why, found)
    if root.cancel_requested:
        # A stop is final: the worker ends the tree as cancelled at its next step.
        return Snapshot(TaskState.TASK_STATE_CANCELED, "stopped")
    waits = _open_waits(root)
    question = _question(waits)
    if question is not None:
        return Snapshot(TaskState.TASK_STATE_INPUT_REQUIRED, _question_text(question))
    if waits:
        return Snapshot(TaskState.TASK_STATE_WORKING, APPROVAL_NOTE)
    if root.status == RunStatus.QUEUED and root.started_at is None:
        return Snapshot(TaskState.TASK_STATE_SUBMITTED)
    return Snapshot(TaskState.TASK_STATE_WORKING)


def _why(root: Run, output: dict[str, object]) -> str:
    reason = output.get("reason") or output.get("refused_by_stop_hook") or root.error
    label = RunStatus(root.status).label
    return f"{label}: {reason}"[:2000] if reason else str(label)


def _question_text(wait: Wait) -> str:
    asked = wait.question if isinstance(wait.question, dict) else {}
    text = str(asked.get("text", ""))
    choices = [str(c) for c in asked.get("choices") or []]
    return f"{text}\n(choices: {', '.join(choices)})" if choices else text


def answer(caller: Caller, row: A2ATask, text: str) -> None:
    """The caller's answer to the question the task's run asks, given to the model as data of
    trust `web` (the step records who answered; the text says it is the caller's)."""
    root = root_run(row)
    question = None if root.is_terminal else _question(_open_waits(root))
    if question is None:
        state = TaskState.Name(snapshot(row).state).removeprefix("TASK_STATE_").lower()
        raise UnsupportedOperationError(
            message=f"Task {row.task_id} is {state.replace('_', '-')}: a message continues a"
            " task only while it asks for input (input-required)."
        )
    try:
        with transaction.atomic():
            exposure.mark(question.run_id, {exposure.UNTRUSTED}, seq=question.seq, by="A2A answer")
            approvals.answer(
                question.pk,
                text=framing.render(text, trust=Trust.WEB, source=SOURCE),
                by=caller.by,
                username=caller.name,
                address=caller.address,
            )
    except (ApprovalError, KernelError) as error:
        raise UnsupportedOperationError(message=error.message) from None


def cancel(caller: Caller, row: A2ATask) -> None:
    """Stop the task's runs through the kernel (their waits close with them)."""
    root = root_run(row)
    if root.is_terminal:
        raise TaskNotCancelableError(
            message=f"Task {row.task_id} has ended ({RunStatus(root.status).label})."
        )
    runs.request_stop(root.pk, reason=RunStatus.CANCELLED, by=caller.by)


def task(row: A2ATask, found: Snapshot | None = None) -> Task:
    """The task as A2A gives it: its status (with its message) and its answer as an artifact."""
    found = found or snapshot(row)
    built = Task(id=str(row.task_id), context_id=row.context_id, status=status(row, found))
    if found.answer is not None:
        built.artifacts.append(artifact(row, found.answer))
    return built


def status(row: A2ATask, found: Snapshot) -> TaskStatus:
    built = TaskStatus(state=found.state)
    if found.note:
        built.message.CopyFrom(
            Message(
                # The same note has the same id: a client sees a repeated status as one.
                message_id=str(uuid.uuid5(row.task_id, f"{found.state}:{found.note}")),
                role=Role.ROLE_AGENT,
                task_id=str(row.task_id),
                context_id=row.context_id,
                parts=[Part(text=found.note)],
            )
        )
    return built


def artifact(row: A2ATask, answer: str) -> Artifact:
    return Artifact(
        artifact_id=str(uuid.uuid5(row.task_id, "answer")),
        name="answer",
        description="The mission's final answer.",
        parts=[Part(text=answer)],
    )
