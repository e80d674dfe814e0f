"""Runs over /api/v1: the tree of a mission, a run, its steps and artifacts, and steering.

Steering calls the kernel's and the steering service's functions, as the console does: a
message (optionally interrupting the step under way), pause, resume, stop, interrupt, and a
fork from a recorded step. Steering a run that has ended is refused with 409.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Any

from django.http import FileResponse, HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, StrictBool, StrictInt

from agentos.core import tokens
from agentos.core.schemas import Text
from approvals import inbox
from kernel import artifacts, runs, versions
from kernel.budgets import CAP_FIELDS
from kernel.models import TERMINAL, Artifact, Run, Step
from missions import forks, steering
from missions.api import not_found
from missions.blueprints import INT32
from missions.engine import outage
from missions.errors import MissionError
from missions.models import Mission, OwnerMessage

logger = logging.getLogger(__name__)

router = Router(tags=["runs"])

SHA256 = re.compile(r"[0-9a-f]{64}")


class RunSpentOut(Schema):
    """What the run's subtree spent (a child's steps count in every ancestor's ledger)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    usd_micros: int
    turns: int
    tool_calls: int


class RunOut(Schema):
    id: int
    mission_id: int
    parent_id: int | None
    root_id: int | None
    depth: int
    status: str
    paused: bool
    stop_requested: bool
    needs_migration: bool = Field(
        description="Recorded by an earlier engine version no program here resumes: nothing runs"
        " until the owner restarts (`/restart`), forks or stops it"
    )
    program: str
    engine_version: str
    model: str
    trigger: str | None
    spent: RunSpentOut
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunCapsOut(Schema):
    max_tokens: int | None
    max_usd_micros: int | None
    max_turns: int | None
    max_tool_calls: int | None
    max_seconds: int | None


class WaitingOnOut(Schema):
    provider: str
    kind: str = Field(description="rate_limited, overloaded, server_error, network or timeout")
    status: int | None = Field(description="The provider's HTTP status, if it answered")
    said: str = Field(description='In the owner\'s words: "Anthropic overloaded (529)"')
    message: str
    holds: int = Field(description="How many times the step was held so far")
    since: datetime
    until: datetime = Field(
        description="When the model is asked again, or when the owner's question expires"
    )
    owner: bool = Field(description="Waiting for the owner (a refused key, an unpaid account)")
    question: int | None = Field(description="The owner's question to answer, if owner")


class RunDetailOut(RunOut):
    caps: RunCapsOut
    prompt_hash: str = Field(description="SHA-256 of the frozen system prompt; empty: not an agent")
    tools_hash: str = Field(description="SHA-256 of the tool list the run was given")
    input: Any
    output: Any
    error: str
    contract: dict[str, Any]
    waiting_on: WaitingOnOut | None = Field(
        description="A waiting run held by a provider's outage: what failed, the next attempt"
    )


class StepCostOut(Schema):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    usd_micros: int


class StepOut(Schema):
    seq: int
    kind: str
    effect: str
    name: str
    request: Any
    result: Any = Field(description="null while the step has no result")
    settled_by: str
    started_at: datetime
    finished_at: datetime | None
    cost: StepCostOut


class StepPage(Schema):
    items: list[StepOut]
    next_after_seq: int | None = Field(description="Pass as `after_seq` for the next page")


class StepFilter(Schema):
    after_seq: int = Field(0, ge=0, le=INT32, description="Steps after this seq")
    limit: int = Field(100, ge=1, le=500)


class ArtifactOut(Schema):
    sha256: str
    name: str
    media_type: str
    size: int
    preview: str
    run_id: int | None
    created_at: datetime


class MessageIn(Schema):
    model_config = ConfigDict(extra="forbid")

    text: Text = Field(max_length=steering.MAX_CHARS)
    interrupt: StrictBool = Field(False, description="Also cut short the step under way")


class MessageOut(Schema):
    id: int
    run_id: int
    text: str
    created_at: datetime
    delivered_seq: int | None = Field(description="The model step it reached; null: not yet")


class ForkIn(Schema):
    model_config = ConfigDict(extra="forbid")

    at_seq: StrictInt = Field(ge=1, le=INT32, description="The new run starts with steps 1..at_seq")


SPENT_FIELDS = tuple(RunSpentOut.model_fields)
COST_FIELDS = tuple(StepCostOut.model_fields)


def run_out(run: Run) -> dict[str, Any]:
    contract = run.contract if isinstance(run.contract, dict) else {}
    trigger = contract.get("trigger")
    return {
        "id": run.pk,
        "mission_id": run.account_id,
        "parent_id": run.parent_id,
        "root_id": run.root_id,
        "depth": run.depth,
        "status": run.status,
        "paused": run.paused,
        "stop_requested": run.cancel_requested,
        "needs_migration": run.needs_migration,
        "program": run.program,
        "engine_version": run.engine_version,
        "model": run.model,
        "trigger": trigger if isinstance(trigger, str) else None,
        "spent": {name: getattr(run, name) for name in SPENT_FIELDS},
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def run_detail_out(run: Run) -> dict[str, Any]:
    return {
        **run_out(run),
        "caps": {name: getattr(run, name) for name in (*CAP_FIELDS, "max_seconds")},
        "prompt_hash": run.prompt_hash,
        "tools_hash": run.tools_hash,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "contract": run.contract if isinstance(run.contract, dict) else {},
        "waiting_on": outage.waiting_on(run),
    }


def run_or_404(run_id: int) -> Run:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise not_found("run", run_id)
    return run


def unfinished_run(run_id: int) -> Run:
    """The run to steer; 404 if unknown, 409 if it has ended (as `steering.send_message`)."""
    run = run_or_404(run_id)
    if run.is_terminal:
        raise MissionError(
            f"Run {run_id} has ended ({run.status}); start a new one.",
            code="run_ended",
            status=409,
        )
    return run


# --- Reading ------------------------------------------------------------------------------------


@router.get(
    "/missions/{mission_id}/runs",
    response=list[RunOut],
    summary="A mission's run tree: every run with its parent and depth, in creation order",
)
def list_runs(request: HttpRequest, mission_id: int) -> list[dict[str, Any]]:
    if not Mission.objects.filter(pk=mission_id).exists():
        raise not_found("mission", mission_id)
    return [run_out(run) for run in Run.objects.filter(account_id=mission_id).order_by("pk")]


class RunFilter(Schema):
    needs_migration: bool = Field(
        False, description="Only the runs parked as needs-migration (what waits for the owner)"
    )
    limit: int = Field(100, ge=1, le=500)


@router.get("/runs", response=list[RunOut], summary="Unfinished runs, newest first")
def list_unfinished_runs(request: HttpRequest, filters: Query[RunFilter]) -> list[dict[str, Any]]:
    found = (
        inbox.needing_migration()
        if filters.needs_migration
        else Run.objects.exclude(status__in=TERMINAL).order_by("-created_at", "-id")
    )
    return [run_out(run) for run in found[: filters.limit]]


@router.get("/runs/{run_id}", response=RunDetailOut, summary="A run: input, output, caps, spend")
def get_run(request: HttpRequest, run_id: int) -> dict[str, Any]:
    return run_detail_out(run_or_404(run_id))


@router.get(
    "/runs/{run_id}/steps",
    response=StepPage,
    summary="A run's journaled steps in order, with their inputs, results and cost",
)
def list_steps(request: HttpRequest, run_id: int, filters: Query[StepFilter]) -> dict[str, Any]:
    run = run_or_404(run_id)
    found = list(
        Step.objects.filter(run=run, seq__gt=filters.after_seq).order_by("seq")[: filters.limit + 1]
    )
    more = len(found) > filters.limit
    found = found[: filters.limit]
    return {
        "items": [
            {
                "seq": step.seq,
                "kind": step.kind,
                "effect": step.effect,
                "name": step.name,
                "request": step.request,
                "result": step.result,
                "settled_by": step.settled_by,
                "started_at": step.started_at,
                "finished_at": step.finished_at,
                "cost": {name: getattr(step, name) for name in COST_FIELDS},
            }
            for step in found
        ],
        "next_after_seq": found[-1].seq if more else None,
    }


@router.get("/runs/{run_id}/artifacts", response=list[ArtifactOut], summary="Files a run produced")
def list_artifacts(request: HttpRequest, run_id: int) -> list[Artifact]:
    return list(Artifact.objects.filter(run=run_or_404(run_id)).order_by("pk"))


@router.get(
    "/artifacts/{sha256}",
    summary="Download an artifact by its SHA-256 (as an attachment, with its media type)",
    openapi_extra={
        "responses": {
            200: {
                "description": "The file, with the media type it was stored with",
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            }
        }
    },
)
def download_artifact(request: HttpRequest, sha256: str) -> FileResponse:
    artifact = Artifact.objects.filter(sha256=sha256).first() if SHA256.fullmatch(sha256) else None
    if artifact is None:
        raise not_found("artifact", sha256)
    try:
        file = artifacts.open_artifact(artifact)
    except FileNotFoundError:
        logger.warning("artifact %s has a row but no file", artifact.sha256)
        raise MissionError(
            f"The file of artifact {sha256} is missing from the data folder.",
            code="artifact_missing",
            status=404,
        ) from None
    # Always an attachment: a stored text/html must not render under the console's origin.
    return FileResponse(
        file,
        as_attachment=True,
        filename=artifact.name or artifact.sha256,
        content_type=artifact.media_type,
    )


# --- Steering -----------------------------------------------------------------------------------


@router.post(
    "/runs/{run_id}/messages",
    response={201: MessageOut},
    summary="Send the agent a message (delivered at its next model call; optionally interrupt)",
)
def send_message(request: HttpRequest, run_id: int, payload: MessageIn) -> Status[OwnerMessage]:
    message = steering.send_message(run_id=run_id, text=payload.text, interrupt=payload.interrupt)
    return Status(201, message)


@router.post("/runs/{run_id}/pause", response=RunOut, summary="Pause (after the step under way)")
def pause(request: HttpRequest, run_id: int) -> dict[str, Any]:
    return run_out(runs.pause_run(run_id, by="owner"))


@router.post("/runs/{run_id}/resume", response=RunOut, summary="Resume a paused run")
def resume(request: HttpRequest, run_id: int) -> dict[str, Any]:
    return run_out(runs.resume_run(run_id, by="owner"))


@router.post("/runs/{run_id}/stop", response=RunOut, summary="Stop a run and its descendants")
def stop(request: HttpRequest, run_id: int) -> dict[str, Any]:
    unfinished_run(run_id)
    runs.request_stop(run_id, by="owner")
    return run_out(run_or_404(run_id))


@router.post(
    "/runs/{run_id}/retry",
    response=RunDetailOut,
    summary="A run waiting on a model provider's outage: ask the provider again now",
)
def retry(request: HttpRequest, run_id: int) -> dict[str, Any]:
    outage.retry_now(run_id, by=tokens.actor(request))
    return run_detail_out(run_or_404(run_id))


@router.post(
    "/runs/{run_id}/interrupt", response=RunOut, summary="Cut short the step under way only"
)
def interrupt(request: HttpRequest, run_id: int) -> dict[str, Any]:
    unfinished_run(run_id)
    runs.request_interrupt(run_id, by="owner")
    return run_out(run_or_404(run_id))


@router.post(
    "/runs/{run_id}/restart",
    response={201: RunDetailOut},
    summary="A run parked as needs-migration: carry on from its last recorded step on this"
    " engine (a fork), and stop it",
)
def restart(request: HttpRequest, run_id: int) -> Status[dict[str, Any]]:
    return Status(201, run_detail_out(versions.restart(run_id, by=tokens.actor(request))))


@router.post(
    "/runs/{run_id}/fork",
    response={201: RunDetailOut},
    summary="A new run whose first `at_seq` steps are this run's recorded ones",
)
def fork(request: HttpRequest, run_id: int, payload: ForkIn) -> Status[dict[str, Any]]:
    return Status(201, run_detail_out(forks.fork(run_id, at_seq=payload.at_seq, by="owner")))
