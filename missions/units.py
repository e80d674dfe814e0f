"""Units of long work (docs/design.md §10, §16): a long mission cut into units of 1 to 3 hours
of work, each ending in a checkpoint whose criteria are verified before the next begins.

- The supervisor (the mission's root run) plans them with `unit_plan`: a key, a title, a budget
  (hours, 1 to 3, and optionally tokens) and checkpoint criteria (command oracles,
  `missions.verification`). The first planned unit is active at once; the others wait.
- `unit_checkpoint` runs the active unit's criteria in the run's sandbox, each a journaled
  `verdict` step; only when every one passes is the unit marked passed and the next one begun
  (one journaled step, an idempotent write). A failing checkpoint is refused with its evidence:
  the next unit does not begin.
- `watch`, before every model turn of a run with the resume routine: a unit over its budget
  (wall time since it began, or the mission's tokens since then) escalates once — a question to
  the owner (`approvals`' durable wait, the owner is notified), whose answer goes to the model.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from approvals.service import ask_question
from kernel.context import Done, RunContext, StepCall
from kernel.models import Effect, Run, Step, StepKind, Trust
from missions import verification
from missions.engine import framing
from missions.models import LedgerWrite, Mission, Unit
from tools.base import Risk, Tool, ToolEnv, ToolError, Worksite

MIN_HOURS, MAX_HOURS = 1, 3
MAX_UNITS = 30
WATCH = "unit-watch"
QUESTION = (
    "Unit {key} ({title}) of mission {mission} has overrun its budget: {reason}. Its checkpoint"
    " has not passed, and the next unit waits for it. How should the agent go on?"
)
ESCALATED = (
    "[system] Unit {key} has overrun its budget ({reason}); the owner was asked how to go on."
    " The owner answered: {answer}"
)


# --- planning --------------------------------------------------------------------------------


def plan(env: ToolEnv, arguments: dict[str, Any]) -> str:
    """`unit_plan`: once per step (`LedgerWrite`, keyed by its idempotency key)."""
    key = env.call.idempotency_key
    earlier = LedgerWrite.objects.filter(key=key).values_list("answer", flat=True).first()
    if earlier is not None:
        return earlier
    run = Run.objects.get(pk=env.run_id)
    if run.parent_id is not None:
        raise ToolError("Only the mission's supervisor (its root run) plans units.")
    if not Mission.objects.filter(pk=run.account_id).exists():
        raise ToolError("This run belongs to no mission: it has no units.")
    wanted = [_clean(item) for item in arguments["units"]]
    keys = [item["key"] for item in wanted]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ToolError(f"Each key once per call; repeated: {', '.join(repeated)}.")
    try:
        with transaction.atomic():
            answer = _plan(run.account_id, wanted)
            LedgerWrite.objects.create(
                key=key,
                mission_id=run.account_id,
                run=run,
                seq=env.call.seq,
                tool="unit_plan",
                answer=answer,
            )
    except IntegrityError:  # a concurrent attempt of this very step wrote it first
        earlier = LedgerWrite.objects.filter(key=key).values_list("answer", flat=True).first()
        if earlier is None:
            raise
        return earlier
    return answer


def _clean(item: dict[str, Any]) -> dict[str, Any]:
    try:
        criteria = verification.validate(item["criteria"])
    except verification.CriteriaError as error:
        raise ToolError(f"Unit {item['key']}: {error.message}") from None
    if any("command" not in c["oracle"] for c in criteria):
        raise ToolError(
            f"Unit {item['key']}: a checkpoint is checked by commands (oracle"
            ' {"command": ...}): it must be verifiable before the next unit begins.'
        )
    tokens = item.get("tokens")
    return {
        "key": item["key"],
        "title": item["title"],
        "budget_seconds": round(float(item["hours"]) * 3600),
        "budget_tokens": int(tokens) if tokens is not None else None,
        "criteria": criteria,
    }


def _plan(mission_id: int, wanted: list[dict[str, Any]]) -> str:
    existing = {u.key: u for u in Unit.objects.select_for_update().filter(mission_id=mission_id)}
    settled = [item["key"] for item in wanted if existing.get(item["key"]) is not None]
    fixed = [key for key in settled if existing[key].status != Unit.Status.PLANNED]
    if fixed:
        raise ToolError(
            f"Units already begun are not changed: {', '.join(fixed)}; plan new units instead."
        )
    if len(existing) + len(wanted) - len(settled) > MAX_UNITS:
        raise ToolError(f"A mission has at most {MAX_UNITS} units.")
    position = max((u.position for u in existing.values()), default=0)
    for item in wanted:
        if item["key"] in existing:
            Unit.objects.filter(pk=existing[item["key"]].pk).update(**item)
        else:
            position += 1
            Unit.objects.create(mission_id=mission_id, position=position, **item)
    begun = _begin_next(mission_id)
    active = begun or Unit.objects.filter(mission_id=mission_id, status=Unit.Status.ACTIVE).first()
    return f"Units planned: {', '.join(i['key'] for i in wanted)}. " + (
        f"Active: {active.key} (its checkpoint: unit_checkpoint)." if active else "None active."
    )


def _begin_next(mission_id: int) -> Unit | None:
    """The next planned unit begun, when none is active; None otherwise."""
    if Unit.objects.filter(mission_id=mission_id, status=Unit.Status.ACTIVE).exists():
        return None
    following = (
        Unit.objects.filter(mission_id=mission_id, status=Unit.Status.PLANNED)
        .order_by("position")
        .first()
    )
    if following is not None:
        following.status, following.started_at = Unit.Status.ACTIVE, timezone.now()
        following.save(update_fields=["status", "started_at"])
    return following


# --- the checkpoint --------------------------------------------------------------------------


def checkpoint(ctx: RunContext, worksite: Worksite, arguments: dict[str, Any]) -> str:
    """`unit_checkpoint`: 1. which unit is active (a journaled read); 2. its criteria, each a
    `verdict` step; 3. all passing: the unit passed and the next begun (an idempotent write).
    Refusals are raised from recorded results, so a replay refuses the same."""
    mission_id = ctx.run.account_id
    found = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name="unit",
        request={"action": "checkpoint"},
        execute=lambda call: Done(_active(mission_id)),
    )
    if found is None:
        raise ToolError("No unit is active: plan units with unit_plan first.")
    attempt = ctx.seq  # the checks of this checkpoint, told apart from earlier ones'
    verdicts = [
        verification.command_verdict(ctx, criterion, attempt) for criterion in found["criteria"]
    ]
    failing = [v for v in verdicts if not v["passes"]]
    if failing:
        lines = [f"Checkpoint of unit {found['key']} not passed; the next unit does not begin:"]
        lines += [
            f"- {v['criterion']}:\n"
            + framing.render(
                str(v["evidence"]), trust=Trust.TOOL, source=f"criterion {v['criterion']}"
            )
            for v in failing
        ]
        raise ToolError("\n".join(lines))

    def advance(call: StepCall) -> Done:
        # Idempotent: replayed after its commit, the unit is passed and the next already begun.
        with transaction.atomic():
            Unit.objects.filter(mission_id=mission_id, key=found["key"]).exclude(
                status=Unit.Status.PASSED
            ).update(status=Unit.Status.PASSED, passed_at=timezone.now())
            _begin_next(mission_id)
            active = Unit.objects.filter(mission_id=mission_id, status=Unit.Status.ACTIVE)
            following = active.values_list("key", flat=True).first()
        return Done({"passed": found["key"], "next": following})

    moved = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.IDEMPOTENT_WRITE,
        name="unit-passed",
        request={"unit": found["key"]},
        execute=advance,
    )
    after = f"Unit {moved['next']} begins now." if moved["next"] else "No unit is left."
    return f"Checkpoint of unit {moved['passed']} passed ({len(verdicts)} criteria). {after}"


def _active(mission_id: int) -> dict[str, Any] | None:
    unit = Unit.objects.filter(mission_id=mission_id, status=Unit.Status.ACTIVE).first()
    if unit is None:
        return None
    return {"key": unit.key, "title": unit.title, "criteria": unit.criteria}


# --- the budget watch ------------------------------------------------------------------------


def watch(ctx: RunContext, turn: int) -> str | None:
    """Before turn `turn`: the message telling the model its unit overran and what the owner
    answered, once per unit; None otherwise. The decision is one journaled read (its replay
    decides the same); the question is the kernel's durable wait."""
    mission_id, mine = ctx.run.account_id, f"{ctx.run_id}:{ctx.seq + 1}"
    seen = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name=WATCH,
        request={"turn": turn},
        execute=lambda call: Done(_overrun(mission_id, mine)),
    )
    if seen is None:
        return None
    question = QUESTION.format(mission=mission_id, **seen)
    answer = ask_question(ctx, question)
    return ESCALATED.format(answer=answer, **seen)


def _overrun(mission_id: int, mine: str) -> dict[str, Any] | None:
    """The active unit over its budget, claimed for escalation by step `mine` (or already by
    it: an earlier attempt of this very step), else None."""
    unit = Unit.objects.filter(mission_id=mission_id, status=Unit.Status.ACTIVE).first()
    if unit is None or unit.started_at is None or unit.escalated_by not in ("", mine):
        return None
    reason = _over(unit)
    if reason is None:
        return None
    claimed = Unit.objects.filter(pk=unit.pk, escalated_by__in=("", mine)).update(escalated_by=mine)
    if not claimed:
        return None
    return {"key": unit.key, "title": unit.title, "reason": reason}


def _over(unit: Unit) -> str | None:
    assert unit.started_at is not None  # noqa: S101  # an active unit has begun
    elapsed = (timezone.now() - unit.started_at).total_seconds()
    if elapsed > unit.budget_seconds:
        return (
            f"{elapsed / 3600:.1f} h of work since it began, for a budget of"
            f" {unit.budget_seconds / 3600:.1f} h"
        )
    if unit.budget_tokens is None:
        return None
    used = (
        Step.objects.filter(
            run__account_id=unit.mission_id, started_at__gte=unit.started_at
        ).aggregate(
            tokens=Sum(
                F("input_tokens")
                + F("output_tokens")
                + F("cache_read_tokens")
                + F("cache_write_tokens")
            )
        )["tokens"]
        or 0
    )
    if used > unit.budget_tokens:
        return f"{used} tokens since it began, for a budget of {unit.budget_tokens}"
    return None


def summary(mission_id: int) -> str:
    """The units as the resume routine shows them: one line each, in order."""
    units = list(Unit.objects.filter(mission_id=mission_id).order_by("position"))
    if not units:
        return ""
    lines = ["Units (each ends with unit_checkpoint; the next begins when it passes):"]
    for unit in units:
        budget = f"{unit.budget_seconds / 3600:g} h" + (
            f", {unit.budget_tokens} tokens" if unit.budget_tokens else ""
        )
        checks = "; ".join(c["oracle"]["command"] for c in unit.criteria)
        lines.append(f"- [{unit.status}] {unit.key}: {unit.title} ({budget}; checks: {checks})")
    return "\n".join(lines)


# --- tools -----------------------------------------------------------------------------------

UNIT_PLAN = Tool(
    name="unit_plan",
    description=(
        "Supervisor only: cut the mission into units of 1 to 3 hours of work, in order. Each"
        " has a key, a title, hours (its budget), optionally tokens, and checkpoint criteria"
        ' (commands: [{"id", "description", "oracle": {"command": "..."}}]) that must pass'
        " before the next unit begins. The first unit begins at once."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "units": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_UNITS,
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
                        "title": {"type": "string", "minLength": 1, "maxLength": 300},
                        "hours": {"type": "number", "minimum": MIN_HOURS, "maximum": MAX_HOURS},
                        "tokens": {"type": "integer", "minimum": 1},
                        "criteria": {"type": "array", "minItems": 1, "maxItems": 20},
                    },
                    "required": ["key", "title", "hours", "criteria"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["units"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.READ,  # the mission's own bookkeeping
    run=plan,
)


def _unsupported(env: ToolEnv, arguments: dict[str, Any]) -> str:
    raise ToolError("unit_checkpoint runs through its interaction.")


UNIT_CHECKPOINT = Tool(
    name="unit_checkpoint",
    description=(
        "Verify the active unit's checkpoint: its criteria run in the sandbox. When all pass,"
        " the unit is done and the next begins; otherwise you are told what fails."
    ),
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.READ,
    min_sandbox_level=1,
    run=_unsupported,
    interact=checkpoint,
)

UNIT_TOOLS = [UNIT_PLAN, UNIT_CHECKPOINT]
UNIT_TOOL_NAMES = [tool.name for tool in UNIT_TOOLS]
