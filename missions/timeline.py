"""A run's timeline as the console shows it: one entry per journaled step, read from the
recorded requests and results (model responses, tool calls with their inputs and outputs,
waits for the owner, compactions, checkpoints). Nothing is made up: a step without a result is
shown as under way, a missing field as absent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from agentos.core.diffs import DiffLine, diff_lines
from kernel.models import Run, Step, StepKind, Wait, WaitKind
from missions.engine import framing
from missions.models import OwnerMessage
from missions.overview import wait_link

MAX_STEPS = 300  # the newest ones; a longer run says how many are left out
LONG_OUTPUT_CHARS = 1200
LONG_OUTPUT_LINES = 16
ARTIFACT = re.compile(r"offloaded to artifact ([0-9a-f]{64})")


@dataclass
class Entry:
    step: Step
    kind: str
    finished: bool
    abandoned: bool = False  # no result, and the run has ended: it never will have one
    # Model responses
    text: str = ""
    reasoning: str = ""
    owner_messages: list[str] = field(default_factory=list)
    asked: list[dict[str, str]] = field(default_factory=list)  # tool calls and their verdicts
    refusal: str = ""
    # Tool calls
    arguments: str = ""
    output: str = ""
    output_lines: int = 0
    long: bool = False
    is_error: bool = False
    permission: str = ""  # why the harness refused the call
    artifact: str = ""  # the sha256 of an output offloaded to an artifact
    diff: list[DiffLine] = field(default_factory=list)
    diff_hidden: int = 0
    # Waits for the owner
    wait: dict[str, Any] = field(default_factory=dict)
    # Anything else: one line
    summary: str = ""
    child: int | None = None  # a spawned run

    @property
    def tokens(self) -> int:
        step = self.step
        return (
            step.input_tokens
            + step.output_tokens
            + step.cache_read_tokens
            + step.cache_write_tokens
        )


@dataclass(frozen=True)
class Timeline:
    entries: list[Entry]
    hidden: int  # older steps left out


def timeline(run: Run, *, limit: int = MAX_STEPS) -> Timeline:
    total = Step.objects.filter(run=run).count()
    steps = list(Step.objects.filter(run=run).order_by("-seq")[:limit])
    steps.reverse()
    waits = {
        wait.seq: wait
        for wait in Wait.objects.filter(
            run=run, kind=WaitKind.HUMAN, seq__in=[s.seq for s in steps]
        )
    }
    entries = [entry(step, waits.get(step.seq)) for step in steps]
    for found in entries:
        found.abandoned = not found.finished and run.is_terminal
    return Timeline(entries, max(0, total - len(steps)))


def entry(step: Step, wait: Wait | None = None) -> Entry:
    result = step.result if isinstance(step.result, dict) else {}
    request = step.request if isinstance(step.request, dict) else {}
    found = Entry(step=step, kind=step.kind, finished=step.finished_at is not None)
    if step.kind == StepKind.MODEL_CALL:
        _model_call(found, result)
    elif step.kind == StepKind.TOOL_CALL:
        _tool_call(found, request, result)
    elif step.kind == StepKind.WAIT_HUMAN:
        _wait_human(found, request, result, wait)
    elif step.kind == StepKind.COMPACTION:
        found.text = str(result.get("narrative") or "")
        files = result.get("files")
        if isinstance(files, dict) and files:
            found.summary = _("%(count)d working file(s) re-read with the summary") % {
                "count": len(files)
            }
    elif step.kind == StepKind.SPAWN:
        child = result.get("run_id")
        found.child = child if isinstance(child, int) else None
    elif step.kind == StepKind.VERDICT and "criterion" in result:
        # A criterion of the definition of done, checked by its oracle, with its evidence.
        found.summary = (
            _("Criterion %(id)s passes: %(evidence)s")
            if result.get("passes") is True
            else _("Criterion %(id)s does not pass: %(evidence)s")
        ) % {"id": result["criterion"], "evidence": str(result.get("evidence", ""))[-600:]}
    elif step.kind == StepKind.VERDICT:
        refusal = result.get("refusal")
        found.summary = (
            _("Not allowed to stop yet: %(reason)s") % {"reason": refusal}
            if refusal
            else _("Allowed to stop.")
            if found.finished
            else ""
        )
    elif step.kind == StepKind.TIMER:
        seconds = request.get("seconds")
        found.summary = _("waits %(seconds)s s") % {"seconds": seconds} if seconds else ""
    elif step.kind == StepKind.CHECKPOINT and found.finished:
        found.summary = _checkpoint(step.name, request, step.result)
    elif found.finished:
        found.summary = _one_line(step.result)
    return found


def _checkpoint(name: str, request: dict[str, Any], result: Any) -> str:
    """The checkpoints the engine and the owner tools record, in words; others as JSON."""
    if name == "context-window" and isinstance(result, int | dict):
        # A bare number: recorded before the checkpoint said whether the provider clears.
        facts = result if isinstance(result, dict) else {"window": result}
        window = {"tokens": f"{facts.get('window', 0):,}"}
        if facts.get("server_clearing"):
            return _("Context window: %(tokens)s tokens; the provider clears old tool results") % (
                window
            )
        return _("Context window: %(tokens)s tokens") % window
    if name == "count-tokens" and isinstance(result, dict):
        if isinstance(result.get("tokens"), int):
            return _("The provider counts %(tokens)s tokens (estimated %(estimate)s)") % {
                "tokens": f"{result['tokens']:,}",
                "estimate": f"{request.get('estimate', 0):,}",
            }
        return _("No count from the provider (%(error)s): the estimate decides") % {
            "error": result.get("error", "")
        }
    if name == "workspace" and isinstance(result, str):
        return _("Works in %(path)s") % {"path": result}
    if name.startswith("approval-request:"):
        return _("The exact call and its preview, recorded before asking you.")
    if name == "notify-owner" and request.get("message"):
        return _("Told you: %(message)s") % {"message": request["message"]}
    return _one_line(result)


def _model_call(found: Entry, result: dict[str, Any]) -> None:
    cleared = result.get("cleared")
    if isinstance(cleared, dict):
        found.summary = _(
            "The provider cleared %(results)s old tool results (%(tokens)s tokens) first."
        ) % {"results": cleared.get("tool_results", 0), "tokens": f"{cleared.get('tokens', 0):,}"}
    # The model's words, without the data-block markup it may quote from what it read.
    found.text = framing.unwrap(str(result.get("text") or ""))
    found.reasoning = framing.unwrap(str(result.get("reasoning") or ""))
    found.owner_messages = [str(m) for m in result.get("owner_messages") or []]
    found.refusal = str(result.get("refusal") or "")
    verdicts = result.get("permissions") or []
    for index, call in enumerate(result.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        verdict = verdicts[index] if index < len(verdicts) else None
        decision = verdict.get("decision", "") if isinstance(verdict, dict) else ""
        found.asked.append({"name": str(call.get("name", "")), "decision": str(decision)})


def _tool_call(found: Entry, request: dict[str, Any], result: dict[str, Any]) -> None:
    found.arguments = _json(request.get("arguments"))
    output = result.get("output")
    text = output if isinstance(output, str) else ("" if output is None else _json(output))
    found.output = text
    found.output_lines = text.count("\n") + 1 if text else 0
    found.long = len(text) > LONG_OUTPUT_CHARS or found.output_lines > LONG_OUTPUT_LINES
    found.is_error = result.get("is_error") is True
    permission = result.get("permission")
    if isinstance(permission, dict) and permission.get("decision") == "deny":
        found.permission = str(permission.get("reason") or "")
    artifact = ARTIFACT.search(text)
    found.artifact = artifact.group(1) if artifact else ""
    if not found.is_error and (found.step.name == "git_diff" or text.startswith("diff --git")):
        found.diff, found.diff_hidden = diff_lines(text)


def _wait_human(
    found: Entry, request: dict[str, Any], result: dict[str, Any], wait: Wait | None
) -> None:
    question = request.get("question")
    question = question if isinstance(question, dict) else {}
    info: dict[str, Any] = {"type": str(question.get("type") or "")}
    if info["type"] == "approval":
        info["tool"] = str(question.get("tool", ""))
        info["arguments"] = _json(question.get("arguments"))
        info["justification"] = str(question.get("justification") or "")
        preview = question.get("preview")
        diff = preview.get("diff") if isinstance(preview, dict) else None
        if diff:
            found.diff, found.diff_hidden = diff_lines(str(diff))
    else:
        info["text"] = str(question.get("text") or "")
    answer = result.get("answer")
    if isinstance(answer, dict):
        if info["type"] == "approval":
            info["outcome"] = _("approved") if answer.get("approved") is True else _("refused")
            info["note"] = str(answer.get("note") or "")
        else:
            info["outcome"] = _("answered")
            info["answer"] = str(answer.get("text") or "")
    elif result.get("refused"):
        info["outcome"] = _("expired (refused)")
    if wait is not None:
        info["link"] = wait_link(wait)
    found.wait = info


def _json(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _one_line(value: Any, chars: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def messages(run: Run) -> list[OwnerMessage]:
    """The owner's steering messages to the run (each says which model step it reached)."""
    return list(OwnerMessage.objects.filter(run=run).order_by("created_at", "id"))
