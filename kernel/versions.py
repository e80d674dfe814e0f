"""Engine versions: which recorded runs this code resumes, and the ones it parks for the owner.

A run records the engine version that wrote its journal (`kernel.programs.ENGINE_VERSION`).
At a claim (`kernel.scheduler.claim_runs`) a runnable run is
- resumed when it was recorded by this version, or by an earlier one its program declares
  compatible; it is then recorded as this version's (see `claimable`);
- parked as "needs migration" when it was recorded by an earlier version no program here
  accepts: flagged, announced by a `run.needs_migration` event, never silently skipped;
- left alone when it was recorded by a later version: a worker of the previous deployment
  still running never takes (or parks) a run the new one has written to.
A run asked to stop is claimed whatever its version: the execution ends it before any program
code runs, so a parked run can be stopped through the ordinary stop path.

The owner's ways out of "needs migration" are restart (`restart`: a fork from the last
recorded step, on this engine), fork from any recorded step, and stop (`kernel.runs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from kernel import journal, programs, runs
from kernel.budgets import CAP_FIELDS
from kernel.exceptions import KernelError
from kernel.journal import Fence
from kernel.models import Run, RunStatus, Step

# The claim query's version filter (see the module docstring); its parameters come from
# `claim_params`. Versions are ordered as whole numbers; a blank one (a run older than the
# field) counts as 0, anything else unreadable as "not earlier" (left alone).
CLAIMABLE_SQL = """(
    r.engine_version = %(engine)s OR r.cancel_requested
    OR (r.program, r.engine_version) IN (
        SELECT * FROM unnest(%(compatible_programs)s::text[], %(compatible_versions)s::text[]))
    OR (NOT r.needs_migration AND CASE
        WHEN r.engine_version = '' THEN 0
        WHEN r.engine_version ~ '^[0-9]{1,9}$' THEN r.engine_version::int END
        < %(engine_rank)s)
)"""


def rank(version: str) -> int | None:
    """A version's place in the order; None for one that is not a whole number."""
    if version == "":
        return 0
    return int(version) if version.isdigit() and len(version) <= 9 else None


def claim_params() -> dict[str, Any]:
    pairs = [
        (name, version)
        for name, versions in sorted(programs.compatible().items())
        for version in sorted(versions)
    ]
    current = rank(programs.ENGINE_VERSION)
    return {
        "engine": programs.ENGINE_VERSION,
        "engine_rank": current if current is not None else 0,
        "compatible_programs": [name for name, _ in pairs],
        "compatible_versions": [version for _, version in pairs],
    }


@dataclass(frozen=True)
class Candidate:
    run_id: int
    account_id: int
    program: str
    engine_version: str
    cancel_requested: bool

    @property
    def resumable(self) -> bool:
        return programs.resumes(self.program, self.engine_version)

    @property
    def claimable(self) -> bool:
        """Resumed here, or only ended here (asked to stop: no program code will run)."""
        return self.resumable or self.cancel_requested


def upgrades(chosen: list[Candidate]) -> list[Candidate]:
    """The chosen runs resumed from an earlier compatible version. The claim records them as
    this version's: from now on this engine writes their journal, so a worker of the earlier
    version (a deployment being replaced) must not take them back."""
    return [c for c in chosen if c.resumable and c.engine_version != programs.ENGINE_VERSION]


def park(cursor: Any, candidates: list[Candidate]) -> None:
    """Flag runs no program here resumes, inside the claim's transaction; one event each.

    A run parked mid-execution (its worker died) is shown as waiting: nothing executes it.
    """
    if not candidates:
        return
    cursor.execute(
        "UPDATE kernel_run SET needs_migration = true, lease_owner = '',"
        " status = CASE WHEN status = 'running' THEN 'waiting' ELSE status END"
        " WHERE id = ANY(%s)",
        [[c.run_id for c in candidates]],
    )
    for c in candidates:
        journal.append_event(
            "run.needs_migration",
            run_id=c.run_id,
            account_id=c.account_id,
            program=c.program,
            recorded_version=c.engine_version,
            engine_version=programs.ENGINE_VERSION,
        )


def announce_upgrades(upgraded: list[Candidate]) -> None:
    for c in upgraded:
        journal.append_event(
            "run.engine_upgraded",
            run_id=c.run_id,
            account_id=c.account_id,
            program=c.program,
            recorded_version=c.engine_version,
            engine_version=programs.ENGINE_VERSION,
        )


def last_recorded_seq(run_id: int) -> int:
    """The last step of the run's unbroken recorded prefix (0: none): where a restart begins."""
    seqs = Step.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "finished_at")
    last = 0
    for seq, finished_at in seqs:
        if seq != last + 1 or finished_at is None:
            break
        last = seq
    return last


def restart(run_id: int, *, by: str = "owner") -> Run:
    """Restart a parked run from its last checkpoint on this engine: a fork from its last
    recorded step (or, with none, a fresh run of the same program and input), and the parked
    run stopped. Only for a run that needs migration."""
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("account").filter(pk=run_id).first()
        if run is None:
            raise KernelError(f"No run {run_id}.", code="not_found", status=404)
        if run.is_terminal or not run.needs_migration:
            raise KernelError(
                f"Run {run_id} does not need a migration; fork it from a step instead.",
                code="not_parked",
                status=409,
            )
        at_seq = last_recorded_seq(run_id)
        if at_seq:
            fresh = runs.fork_run(run_id, at_seq=at_seq, by=by)
        else:
            fresh = runs.start_run(
                account=run.account,
                program=run.program,
                input=run.input,
                model=run.model,
                contract={**run.contract, "restarted_from": {"run": run_id}},
                caps={
                    name: getattr(run, name)
                    for name in (*CAP_FIELDS, "max_seconds")
                    if getattr(run, name) is not None
                },
            )
        journal.append_event(
            "run.restarted",
            run_id=run_id,
            account_id=run.account_id,
            restarted_as=fresh.pk,
            seq=at_seq,
            engine_version=programs.ENGINE_VERSION,
            by=by,
        )
        runs.request_stop(run_id, reason=RunStatus.CANCELLED, by=by)
    return fresh


def record_fingerprint(fence: Fence, *, prompt_hash: str, tools_hash: str) -> None:
    """What the run's program was started with (its prompt and tool list, hashed), recorded once
    and fenced: a replay or a zombie never rewrites it."""
    Run.objects.filter(pk=fence.run_id, fence=fence.token, prompt_hash="").update(
        prompt_hash=prompt_hash, tools_hash=tools_hash
    )
