"""The supervisor ledger of a mission: its plan items (who works on what, how far, on what
proof) and the facts established on the way (with the journal events they rest on).

Rules, enforced here whatever the model asks:
- the supervisor — the mission's root run — plans and assigns items (`ledger_plan`);
- a worker — any run below it — changes only the items it owns (`ledger_update`); an item
  assigned by contract name before its run existed is owned by the first run of that name that
  touches it;
- an item becomes done only with proof: commands run (each must be a shell call recorded in
  this mission's journal whose last run exited 0, by the exit code the harness recorded),
  tests passed, files, event ids (each an event of this mission);
- a fact cites events: the ones given, else the run's newest (the journal up to the call);
- a sensitive mission's run (`Spec.sensitive`) plans before it reads untrusted content (the Web
  tools refuse until its ledger has a plan: `sensitive_refusal`), and once its tree has read
  some (`kernel.exposure`), its plan is frozen: no item added or changed, an item only marked
  done with proof — what the run set out to do is not rewritten by what it read.

Each write is one transaction keyed by its step's idempotency key (`LedgerWrite`): replayed
after a crash, it answers what it answered and changes nothing twice. Each change appends a
`ledger.changed` event to the mission's stream, which the Mission screen listens to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q

from kernel import exposure, journal
from kernel.models import Effect, Event, Run, Step, StepKind, Trust
from missions.models import Fact, LedgerWrite, Mission, PlanItem
from tools.base import Risk, Tool, ToolEnv, ToolError

EVENT = "ledger.changed"
PROOF_KINDS = ("commands", "tests", "files", "events")
MAX_ITEMS = 100  # per mission: a plan, not a backlog
KEY_PATTERN = "^[a-z0-9][a-z0-9._-]{0,63}$"
STATUSES = [status.value for status in PlanItem.Status]


@dataclass(frozen=True)
class Ledger:
    """What a mission's ledger holds now, for the Mission screen and `ledger_view`."""

    items: list[PlanItem]
    facts: list[Fact]

    @property
    def done(self) -> int:
        return sum(1 for item in self.items if item.status == PlanItem.Status.DONE)


def of(mission_id: int) -> Ledger:
    items = list(PlanItem.objects.filter(mission_id=mission_id).select_related("owner"))
    facts = list(Fact.objects.filter(mission_id=mission_id))
    return Ledger(items, facts)


def is_supervisor(run: Run) -> bool:
    """The mission's root run (a fork of it is a root too): it plans and assigns."""
    return run.parent_id is None


def contract_name(run: Run) -> str:
    """The name its parent delegated it under (`missions.delegation`), if any."""
    spec = run.input.get("contract") if isinstance(run.input, dict) else None
    for contract in (spec, run.contract):
        if isinstance(contract, dict) and isinstance(contract.get("name"), str):
            return str(contract["name"])
    return ""


def is_sensitive(run: Run) -> bool:
    """Whether `run` belongs to a sensitive run tree (its input's or its root's `sensitive`)."""
    inputs = [run.input]
    if run.root_id is not None and run.root_id != run.pk:
        inputs += Run.objects.filter(pk=run.root_id).values_list("input", flat=True)
    return any(isinstance(given, dict) and given.get("sensitive") is True for given in inputs)


def sensitive_refusal(run_id: int, tool: str) -> str:
    """Why `tool`, which reads untrusted content, may not run yet in run `run_id` ("" when it
    may): the harness asks before the call (it marks the tree before the call runs), the Web
    tools again in their own step."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or not is_sensitive(run):
        return ""
    if PlanItem.objects.filter(mission_id=run.account_id).exists():
        return ""
    return (
        f"{tool} refused: this mission is sensitive, so it plans before it reads anything from"
        " outside. Write the plan first with ledger_plan (the supervisor) — once untrusted"
        " content has been read, the plan can no longer be changed, only its items marked done"
        " with proof."
    )


def _frozen(run: Run) -> dict[str, Any] | None:
    """Where the tree of a sensitive `run` first read untrusted content, if it has."""
    if not is_sensitive(run):
        return None
    return exposure.of_tree(run.pk).flags.get(exposure.UNTRUSTED)


def _frozen_why(where: dict[str, Any]) -> str:
    return (
        f"this sensitive mission's plan is frozen: its run tree read untrusted content (step"
        f" {where['seq']} of run {where['run']}, {where['by']})"
    )


# --- writes --------------------------------------------------------------------------------


def _write(env: ToolEnv, tool: str, change: Callable[[Run], tuple[str, dict[str, Any]]]) -> str:
    """Apply `change` once per step: its answer, or the answer of the earlier attempt."""
    key = env.call.idempotency_key
    earlier = LedgerWrite.objects.filter(key=key).values_list("answer", flat=True).first()
    if earlier is not None:
        return earlier
    run = Run.objects.get(pk=env.run_id)
    if not Mission.objects.filter(pk=run.account_id).exists():
        raise ToolError("This run belongs to no mission: it has no ledger.")
    with transaction.atomic():
        answer, details = change(run)
        LedgerWrite.objects.create(
            key=key, mission_id=run.account_id, run=run, seq=env.call.seq, tool=tool, answer=answer
        )
        journal.append_event(
            EVENT,
            run_id=run.pk,
            account_id=run.account_id,
            seq=env.call.seq,
            trust=Trust.AGENT,
            tool=tool,
            **details,
        )
    return answer


def plan(env: ToolEnv, arguments: dict[str, Any]) -> str:
    return _write(env, "ledger_plan", lambda run: _plan(run, env.call.seq, arguments["items"]))


def _plan(run: Run, seq: int, wanted: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    if not is_supervisor(run):
        raise ToolError(
            f"Only the mission's supervisor (its root run) plans; you are run {run.pk}, a"
            " sub-agent: change the items you own with ledger_update."
        )
    frozen = _frozen(run)
    if frozen is not None:
        raise ToolError(f"Plan not changed: {_frozen_why(frozen)}; no item is added or changed.")
    keys = [item["key"] for item in wanted]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ToolError(f"Each key once per call; repeated: {', '.join(repeated)}.")
    mission_id = run.account_id
    existing = {
        item.key: item
        for item in PlanItem.objects.select_for_update().filter(mission_id=mission_id)
    }
    new = [key for key in keys if key not in existing]
    if len(existing) + len(new) > MAX_ITEMS:
        raise ToolError(
            f"A plan has at most {MAX_ITEMS} items; it has {len(existing)}, this adds {len(new)}."
        )
    run_owners = {item["owner"] for item in wanted if isinstance(item.get("owner"), int)}
    found = set(
        Run.objects.filter(pk__in=run_owners, account_id=mission_id).values_list("pk", flat=True)
    )
    strangers = sorted(run_owners - found)
    if strangers:
        raise ToolError(
            f"Not runs of this mission: {', '.join(map(str, strangers))}; an owner is one of"
            " its runs, or the name of the contract you will delegate the item under."
        )
    position = max((item.position for item in existing.values()), default=0)
    added, changed = [], []
    for item in wanted:
        owner = item.get("owner")
        fields: dict[str, Any] = {
            "title": item["title"],
            "owner_id": owner if isinstance(owner, int) else None,
            "owner_name": owner if isinstance(owner, str) else "",
            "updated_by": run,
            "updated_seq": seq,
        }
        if item["key"] in existing:
            current = existing[item["key"]]
            if "owner" not in item:  # a title changed, the owner kept
                fields["owner_id"], fields["owner_name"] = current.owner_id, current.owner_name
            for name, value in fields.items():
                setattr(current, name, value)
            current.save()
            changed.append(item["key"])
        else:
            position += 1
            PlanItem.objects.create(
                mission_id=mission_id, key=item["key"], position=position, **fields
            )
            added.append(item["key"])
    total = len(existing) + len(added)
    done = sum(1 for item in existing.values() if item.status == PlanItem.Status.DONE)
    parts = []
    if added:
        parts.append(f"added {', '.join(added)}")
    if changed:
        parts.append(f"changed {', '.join(changed)}")
    answer = f"Plan {'; '.join(parts)}. It has {total} item(s), {done} done."
    return answer, {"items": keys}


def update(env: ToolEnv, arguments: dict[str, Any]) -> str:
    return _write(env, "ledger_update", lambda run: _update(run, env.call.seq, arguments))


def _update(run: Run, seq: int, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if not {"status", "proof", "note"} & set(arguments):
        raise ToolError("Give a status, a proof or a note: nothing to change.")
    key = arguments["key"]
    item = PlanItem.objects.select_for_update().filter(mission_id=run.account_id, key=key).first()
    if item is None:
        known = PlanItem.objects.filter(mission_id=run.account_id).values_list("key", flat=True)
        listed = ", ".join(known) or "none yet (the supervisor plans them with ledger_plan)"
        raise ToolError(f"No plan item {key!r}; items: {listed}.")
    frozen = _frozen(run)
    if frozen is not None and (
        arguments.get("status") != PlanItem.Status.DONE or "proof" not in arguments
    ):
        raise ToolError(
            f"Item {key!r} not changed: {_frozen_why(frozen)}; an item may only be marked done,"
            " with proof."
        )
    supervisor = is_supervisor(run)
    if not supervisor:
        _check_owner(run, item)
        if item.status == PlanItem.Status.DONE:
            raise ToolError(f"Item {key!r} is done; only the supervisor reopens it.")
    status = arguments.get("status", item.status)
    proof = _proof(run.account_id, arguments["proof"]) if "proof" in arguments else item.proof
    note = arguments.get("note", item.note)
    finishing = status == PlanItem.Status.DONE and item.status != PlanItem.Status.DONE
    if finishing and not any(proof.get(kind) for kind in PROOF_KINDS):
        raise ToolError(
            f"Item {key!r} is done only with proof: give proof.commands (shell commands run),"
            " proof.tests (tests that passed), proof.files or proof.events."
        )
    failing = status == PlanItem.Status.FAILED and item.status != PlanItem.Status.FAILED
    if failing and not str(arguments.get("note", "")).strip():
        raise ToolError(f"Say why item {key!r} failed, in a note.")
    if item.owner_id is None and not supervisor:
        item.owner = run  # the first run of the contract's name to touch it owns it
    item.status, item.proof, item.note = status, proof, note
    item.updated_by, item.updated_seq = run, seq
    item.save()
    return f"Item {key!r} is {status}.", {"items": [key], "status": status}


def _check_owner(run: Run, item: PlanItem) -> None:
    if item.owner_id == run.pk:
        return
    if item.owner_id is None and item.owner_name and item.owner_name == contract_name(run):
        return
    if item.owner_id is not None:
        whose = f"belongs to run {item.owner_id}"
    elif item.owner_name:
        whose = f"is assigned to the sub-agent named {item.owner_name!r}"
    else:
        whose = "is not assigned to you"
    raise ToolError(
        f"Item {item.key!r} {whose}; a sub-agent changes only its own items (you are run {run.pk})."
    )


def _proof(mission_id: int, given: dict[str, Any]) -> dict[str, Any]:
    """The proof, each claim checked against the journal where it can be."""
    proof = {kind: list(given.get(kind, [])) for kind in PROOF_KINDS if given.get(kind)}
    commands = proof.get("commands", [])
    if commands:
        # Each command's latest run in the mission: a proof is a command that passed.
        last: dict[str, Any] = {}
        for command, result in (
            Step.objects.filter(
                run__account_id=mission_id,
                kind=StepKind.TOOL_CALL,
                name="shell",
                request__arguments__command__in=commands,
            )
            .exclude(finished_at=None)
            .order_by("finished_at", "pk")
            .values_list("request__arguments__command", "result")
        ):
            last[command] = result
        never = [command for command in commands if command not in last]
        if never:
            raise ToolError(
                "A proof cites what was run; never run in this mission (shell): "
                + "; ".join(repr(command) for command in never)
                + "."
            )
        failed = [command for command in commands if not _passed(last[command])]
        if failed:
            raise ToolError(
                "A proof cites commands that passed; the last run of these did not (exit code"
                " not 0, or not recorded): " + "; ".join(repr(command) for command in failed) + "."
            )
    if proof.get("events"):
        _check_events(mission_id, proof["events"])
    return proof


def _passed(result: Any) -> bool:
    """Whether a recorded shell call exited 0, as the harness journaled it (`exit_code`, an int
    set from the sandbox's result). Never from the output: the command wrote that, and can print
    an outcome line of its own. A result journaled before the field existed does not count (its
    code is unknown): the command is run again to cite it."""
    if not isinstance(result, dict) or result.get("is_error"):
        return False
    code = result.get("exit_code")
    return type(code) is int and code == 0


def _check_events(mission_id: int, events: list[int]) -> None:
    known = set(
        Event.objects.filter(pk__in=events)
        .filter(Q(account_id=mission_id) | Q(run__account_id=mission_id))
        .values_list("pk", flat=True)
    )
    unknown = sorted(set(events) - known)
    if unknown:
        raise ToolError(f"Not events of this mission: {', '.join(map(str, unknown))}.")


def fact(env: ToolEnv, arguments: dict[str, Any]) -> str:
    return _write(env, "ledger_fact", lambda run: _fact(run, env.call.seq, arguments))


def _fact(run: Run, seq: int, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    events = sorted(set(arguments.get("events", [])))
    if events:
        _check_events(run.account_id, events)
    else:
        # The journal up to this call: the run's newest event (`run.created` at least).
        newest = Event.objects.filter(run_id=run.pk).order_by("-id").values_list("pk", flat=True)
        events = list(newest[:1])
        if not events:
            raise ToolError("A fact cites events, and this run has none yet: give events.")
    made = Fact.objects.create(
        mission_id=run.account_id, text=arguments["text"], source_events=events, run=run, seq=seq
    )
    cited = ", ".join(map(str, events))
    return f"Fact {made.pk} recorded (events {cited}).", {"fact": made.pk}


# --- reads ---------------------------------------------------------------------------------


def view(env: ToolEnv, arguments: dict[str, Any]) -> str:
    mission_id = Run.objects.values_list("account_id", flat=True).get(pk=env.run_id)
    return render(of(mission_id))


def render(ledger: Ledger) -> str:
    """The ledger as the model reads it: items in plan order, then facts."""
    lines = [f"Plan ({len(ledger.items)} item(s), {ledger.done} done):"]
    if not ledger.items:
        lines.append("- none yet")
    for item in ledger.items:
        if item.owner_id is not None:
            owner = f"run {item.owner_id}"
        elif item.owner_name:
            owner = f"for the sub-agent {item.owner_name!r}"
        else:
            owner = "unassigned"
        line = f"- [{item.status}] {item.key}: {item.title} ({owner})"
        if item.proof:
            shown = "; ".join(
                f"{kind}: {', '.join(map(str, item.proof[kind]))}"
                for kind in PROOF_KINDS
                if item.proof.get(kind)
            )
            line += f" proof: {shown}"
        if item.note:
            line += f" note: {item.note}"
        lines.append(line)
    lines.append(f"Facts ({len(ledger.facts)}):")
    lines.extend(
        f"- {item.text} (events {', '.join(map(str, item.source_events))})" for item in ledger.facts
    )
    return "\n".join(lines)


# --- tools ---------------------------------------------------------------------------------

_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 2000}}
_EVENTS = {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 50}
_KEY = {"type": "string", "pattern": KEY_PATTERN}

LEDGER_PLAN = Tool(
    name="ledger_plan",
    description=(
        "Supervisor only: add or change plan items of the mission's ledger. Each item has a"
        " key (lowercase, e.g. 'fix-parser'), a title and an owner: a run id, or the name of"
        " the contract you will delegate it under. Items keep their status."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 50,
                "items": {
                    "type": "object",
                    "properties": {
                        "key": _KEY,
                        "title": {"type": "string", "minLength": 1, "maxLength": 300},
                        "owner": {
                            "oneOf": [
                                {"type": "integer", "minimum": 1},
                                {"type": "string", "minLength": 1, "maxLength": 64},
                                {"type": "null"},
                            ]
                        },
                    },
                    "required": ["key", "title"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.READ,  # the mission's own bookkeeping: nothing outside it changes
    run=plan,
)
LEDGER_UPDATE = Tool(
    name="ledger_update",
    description=(
        "Change a plan item you own (the supervisor: any item): its status (todo, doing,"
        " done, failed), its proof, a note. Done needs proof: shell commands you ran, tests"
        " that passed, files, event ids. Failed needs a note saying why."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "key": _KEY,
            "status": {"enum": STATUSES},
            "proof": {
                "type": "object",
                "properties": {
                    "commands": _STRINGS,
                    "tests": _STRINGS,
                    "files": _STRINGS,
                    "events": _EVENTS,
                },
                "additionalProperties": False,
            },
            "note": {"type": "string", "maxLength": 2000},
        },
        "required": ["key"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.READ,
    run=update,
)
LEDGER_FACT = Tool(
    name="ledger_fact",
    description=(
        "Record a fact established for this mission, citing the journal events it rests on"
        " (without events: the journal up to now)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": 2000},
            "events": _EVENTS,
        },
        "required": ["text"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.READ,
    run=fact,
)
LEDGER_VIEW = Tool(
    name="ledger_view",
    description="Read the mission's ledger: plan items with owner, status and proof; facts.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=view,
)

LEDGER_TOOLS = [LEDGER_PLAN, LEDGER_UPDATE, LEDGER_FACT, LEDGER_VIEW]
LEDGER_TOOL_NAMES = [tool.name for tool in LEDGER_TOOLS]
WRITE_TOOL_NAMES = frozenset({"ledger_plan", "ledger_update", "ledger_fact"})
