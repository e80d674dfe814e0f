"""Delegation: the `delegate` tool, through which an agent hands tasks to sub-agents under typed
contracts, and the stop hook `envelope` that holds a sub-agent to its result envelope.

A call carries 1 to 12 contracts. The tool, as journaled steps of the parent's run:

1. plans (one `delegate-plan` step): validates every contract against what the parent may give
   (its own tools, a known role, a done criterion at least, a schema that is one, the depth of
   the run tree) and routes each child — model and effort by role (`routing.route_for`), failing
   over to the other provider when the role's own has no key (only here, at a sub-agent's
   boundary: a running conversation never changes provider), the scripted model when the parent
   is scripted (the child plays `script["children"][name]`). Any refusal is one precise error
   result the parent's model reads; nothing is spawned;
2. for writers, checkpoints the parent's worktree (the child's worktree is made from it);
3. spawns each child (one spawn step each: a replay finds the children it made, never makes
   another, and a child that ended is never run again);
4. joins them (a durable wait: the parent leaves its worker until they all end);
5. records the children's result envelopes as the call's result — data, as the kernel records a
   tool's output, never instructions — built from each child's status: its own envelope when it
   ended `done`, else one saying plainly why not (its budget, its failure, its refusal).

Limits the kernel holds: the depth of a run tree (`runs.MAX_DEPTH`), the account's concurrency
(a mission's `max_concurrent_runs`: children beyond it wait in the queue), the global cap on
running runs (`GlobalBudget.max_running_runs`), and the budget of every subtree (a child's spend
is debited to its ancestors with each of its steps).
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from django.utils import timezone

from kernel.context import Done, RunContext, StepCall
from kernel.models import Effect, Run, RunStatus, StepKind
from kernel.runs import MAX_DEPTH
from missions.engine import harness, relief
from missions.engine.spec import Spec
from missions.errors import MissionError
from missions.models import Mission, Role
from missions.providers.registry import ready
from missions.routing import Route, configured_route, failover_for
from tools import levels, registry
from tools.base import Risk, Tool, ToolEnv, ToolError, Workbench

NAME = "delegate"
HOOK = "envelope"
MAX_TASKS = 12
DEFAULT_TURNS = 30
EFFORTS = ("low", "medium", "high")
CONTEXT_MODES = ("fresh", "fork", "artifact_only")
# What a child may say of itself; `budget_exhausted` and `cancelled` are the kernel's to say.
OWN_STATUSES = ("done", "partial", "failed", "blocked")
STATUSES = (*OWN_STATUSES, "budget_exhausted", "cancelled")
ARTIFACT = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}

_TEXT = {"type": "string", "minLength": 1, "maxLength": 2000}
CONTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
            "description": "A short label, unique within the call (letters, digits, _ . -).",
        },
        "objective": {"type": "string", "minLength": 1, "maxLength": 20_000},
        "role": {"enum": list(Role.values), "description": "Default executor."},
        "context": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 500},
            "maxItems": 50,
            "description": "References to start from: file paths, artifact ids, memory notes.",
        },
        "boundaries": {"type": "array", "items": _TEXT, "maxItems": 30},
        "output_schema": {
            "type": "object",
            "description": "JSON Schema of the result's payload (default: any object).",
        },
        "tools": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 100},
            "maxItems": 100,
            "description": "Allow-list, a subset of your own tools (default: your read-only"
            " tools, or all of yours for a writer; never `delegate` unless listed).",
        },
        "sandbox_level": {"type": "integer", "minimum": 0, "maximum": 3},
        "writes": {
            "type": "boolean",
            "description": "false (default): a read-only worker. true: a writer in its own"
            " worktree made from your current files, on its own branch, for you to merge.",
        },
        "effort": {"enum": list(EFFORTS)},
        "budget": {
            "type": "object",
            "properties": {
                "tokens": {"type": "integer", "exclusiveMinimum": 0},
                "dollars": {"type": "number", "exclusiveMinimum": 0},
                "turns": {"type": "integer", "exclusiveMinimum": 0, "maximum": 500},
                "seconds": {"type": "integer", "exclusiveMinimum": 0},
            },
            "additionalProperties": False,
        },
        "done_criteria": {
            "type": "array",
            "items": _TEXT,
            "maxItems": 30,
            "description": "Required: at least one checkable statement of when the task is done.",
        },
        "context_mode": {"enum": list(CONTEXT_MODES), "description": "Default fresh."},
    },
    "required": ["name", "objective"],
    "additionalProperties": False,
}

ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"enum": list(OWN_STATUSES)},
        "payload": {"type": "object"},
        "artifacts": {"type": "array", "items": {"type": "string"}},
        "evidence": {
            "type": "object",
            "properties": {
                key: {"type": "array", "items": {"type": "string"}}
                for key in ("commands", "tests", "sources")
            },
            "additionalProperties": False,
        },
        "open_questions": {"type": "array", "items": {"type": "string"}},
        "error": {"type": "string"},
    },
    "required": ["status", "payload"],
    "additionalProperties": False,
}
_ENVELOPE_VALIDATOR = jsonschema.Draft202012Validator(ENVELOPE_SCHEMA)

INSTRUCTIONS = """\
You are a sub-agent: another agent gave you one task under a contract. Work only on it, within
its boundaries, with the tools you are given. Your final answer is your result envelope, a JSON
object and nothing else; your parent sees only that envelope, never your conversation."""
WRITER_INSTRUCTIONS = """\
You work in a repository of your own, made from your parent's files, mounted at /workspace in the
sandbox where the shell tool runs commands. Commit your work with git_commit on your branch;
your parent merges it. Do not push."""


def _not_here(env: ToolEnv, arguments: dict[str, Any]) -> str:
    raise RuntimeError("delegate runs through `interact`")  # pragma: no cover


# --- the tool ------------------------------------------------------------------------------------


def _delegate(ctx: RunContext, bench: Workbench, arguments: dict[str, Any]) -> str:
    tasks = arguments["tasks"]
    plan = ctx.step(
        StepKind.CHECKPOINT,
        effect=Effect.READ,
        name="delegate-plan",
        request={"tasks": tasks},
        execute=lambda call: Done(_plan(ctx, bench, tasks)),
    )
    if "refused" in plan:
        raise ToolError(plan["refused"])
    children: list[dict[str, Any]] = plan["children"]
    if any(child["input"]["contract"]["writes"] for child in children):
        if bench.workspace is None:  # the plan refuses writers without one
            raise ToolError("delegate: this run has no workspace to give writers.")
        # The writers start from the parent's files as they are now, uncommitted edits included.
        checkpoint = harness._checkpoint(ctx, bench.workspace, NAME)
        base = {"run": ctx.run_id, "workspace": str(bench.workspace), **checkpoint}
        for child in children:
            if child["input"]["contract"]["writes"]:
                child["input"]["contract"]["base_checkpoint"] = base
    ids = [ctx.spawn("agent", child["input"], caps=child["caps"]) for child in children]
    ctx.join(ids)
    names = [child["input"]["contract"]["name"] for child in children]

    def gather(call: StepCall) -> Done:
        envelopes = [
            _envelope_of(Run.objects.get(pk=run_id), name)
            for run_id, name in zip(ids, names, strict=True)
        ]
        text = json.dumps(envelopes, ensure_ascii=False, indent=1)
        return Done({"output": relief.offload(text, tool=NAME, run=ctx.run), "is_error": False})

    # A tool call's step: the envelopes reach the model as data (the trust the kernel records
    # for a tool's output), and a replay renders the bytes recorded here.
    result = ctx.step(
        StepKind.TOOL_CALL, effect=Effect.READ, name=NAME, request={"runs": ids}, execute=gather
    )
    return str(result["output"])


DELEGATE = Tool(
    name=NAME,
    description=(
        "Hand tasks to sub-agents, each under a contract (objective, done criteria, tools,"
        " budget, output schema), and wait for their results: one result envelope per task"
        " (status, payload, artifacts, evidence, open questions, error). Independent tasks in one"
        " call run in parallel. Read-only workers by default; `writes: true` gives a worker its"
        " own worktree of your current files and a branch for you to merge."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "items": CONTRACT_SCHEMA,
                "minItems": 1,
                "maxItems": MAX_TASKS,
            }
        },
        "required": ["tasks"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_delegate,
)


# --- the advisor ---------------------------------------------------------------------------------

ADVISOR = "consult_advisor"
ADVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"advice": {"type": "string", "minLength": 1}},
    "required": ["advice"],
}


def _consult(ctx: RunContext, bench: Workbench, arguments: dict[str, Any]) -> str:
    """The advisor shape: a cheaper executor asks the planner's model — the strongest the
    routes name — one question. A delegation of one read-only task, so the advisor is a
    sub-agent like any other: its own run, budget and envelope; it sees only what is asked and
    the references given, and reads files with the asker's read tools."""
    task = {
        "name": "advisor",
        "objective": "Advise another agent, who asks: " + arguments["question"],
        "role": "planner",
        "context": list(arguments.get("context", [])),
        "boundaries": ["Advise only: change nothing."],
        "output_schema": ADVICE_SCHEMA,
        "done_criteria": ["The advice answers the question asked, with its reasons."],
    }
    return _delegate(ctx, bench, {"tasks": [task]})


CONSULT = Tool(
    name=ADVISOR,
    description=(
        "Ask a stronger model for advice on one question (a plan, a hard bug, a decision):"
        " it reads what you point it to and answers in an envelope whose payload is"
        " {advice}. It costs more per token than you: ask when stuck or before a risky step."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": 20_000},
            "context": CONTRACT_SCHEMA["properties"]["context"],
        },
        "required": ["question"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_not_here,
    interact=_consult,
)


# --- the plan ------------------------------------------------------------------------------------


def _plan(ctx: RunContext, bench: Workbench, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """`{"children": [{"input", "caps"}]}`, or `{"refused": why}` naming every problem found."""
    parent = Spec.from_input(ctx.input)
    if ctx.run.depth >= MAX_DEPTH:
        return {
            "refused": f"delegate: this run is at depth {ctx.run.depth} of its run tree, the"
            f" deepest a run tree goes ({MAX_DEPTH}): it cannot delegate. Do the work yourself."
        }
    problems: list[str] = []
    names = [str(task["name"]) for task in tasks]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        problems.append(f"task names must be unique within a call: {', '.join(twice)} repeated")
    mission = Mission.objects.get(pk=ctx.run.account_id)
    children = []
    for task in tasks:
        found: list[str] = []
        child = _child(ctx, bench, parent, mission, task, found)
        problems.extend(f"task {task['name']!r}: {problem}" for problem in found)
        children.append(child)
    if problems:
        return {"refused": "delegate refused, nothing was started: " + "; ".join(problems) + "."}
    return {"children": children}


def _child(
    ctx: RunContext,
    bench: Workbench,
    parent: Spec,
    mission: Mission,
    task: dict[str, Any],
    problems: list[str],
) -> dict[str, Any]:
    """The child's run input and caps; what is wrong with the task goes to `problems`."""
    name = str(task["name"])
    writes = bool(task.get("writes", False))
    mode = task.get("context_mode", "fresh")
    role = task.get("role", "executor")
    criteria = [str(text).strip() for text in task.get("done_criteria", [])]
    if not criteria or not all(criteria):
        problems.append(
            "no done criteria: a task is delegated only with at least one done criterion"
            " (done_criteria: checkable statements of when it is done)"
        )
    schema = task.get("output_schema", DEFAULT_OUTPUT_SCHEMA)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
        if schema.get("type", "object") != "object":
            problems.append("output_schema must describe an object (the payload is one)")
    except jsonschema.exceptions.SchemaError as error:
        problems.append(f"output_schema is not a valid JSON Schema: {error.message}")
    tools = _tools(parent, task, writes, problems)
    references = [str(ref) for ref in task.get("context", [])]
    if mode == "artifact_only":
        strange = [ref for ref in references if not ARTIFACT.match(ref)]
        if strange or not references:
            problems.append(
                "context_mode artifact_only needs context to be artifact ids (sha256 hex)"
                + (f", not {', '.join(strange[:3])}" if strange else "")
            )
        tools = sorted({*tools, "read_artifact"})
    if writes and (bench.workspace is None or not parent.repository):
        problems.append("writes: true needs a repository, and this run has none")
    if writes and mode == "artifact_only":
        problems.append("a writer works in a repository: context_mode artifact_only is read-only")
    level = task.get("sandbox_level")
    if level is not None and level < parent.sandbox_level:
        # The mission's risk class set the parent's level: no child works less confined.
        problems.append(
            f"sandbox_level {level} is below this run's ({parent.sandbox_level}): a sub-agent"
            " works at its parent's level or higher"
        )
    elif level is not None and (why := levels.unavailable(level)) is not None:
        problems.append(f"sandbox_level {level} is not offered: {why}")
    if writes and max(level or 0, parent.sandbox_level) == 0:
        problems.append("writes: true needs a sandbox, and this run reads only (sandbox level 0)")
    route, failover = _route(parent, mission, role, task, problems)
    budget = task.get("budget", {})
    caps = {
        cap: value
        for cap, value in (
            ("max_tokens", budget.get("tokens")),
            ("max_usd_micros", _micros(budget.get("dollars"))),
            ("max_seconds", budget.get("seconds")),
        )
        if value is not None
    }
    contract = {
        "name": name,
        "objective": task["objective"],
        "role": role,
        "context": references,
        "boundaries": list(task.get("boundaries", [])),
        "output_schema": schema,
        "tools": tools,
        "sandbox_level": level,
        "writes": writes,
        "effort": task.get("effort"),
        "budget": budget,
        "done_criteria": criteria,
        "context_mode": mode,
        "parent": ctx.run_id,
        **({"failover": failover} if failover else {}),
    }
    spec: dict[str, Any] = {
        "goal": _goal(contract, parent),
        "provider": route.provider,
        "model": route.model,
        "role": role,
        "effort": task.get("effort") or route.effort,
        "thinking": route.provider != "scripted",
        "tools": tools,
        "constraints": list(contract["boundaries"]),
        "max_turns": int(budget.get("turns", DEFAULT_TURNS)),
        "stop_hook": HOOK,
        "instructions": INSTRUCTIONS + (f"\n\n{WRITER_INSTRUCTIONS}" if writes else ""),
        "memory_index": parent.memory_index,
        "repository": "" if mode == "artifact_only" else parent.repository,
        "base": parent.base,
        "checkpoints": writes and parent.checkpoints,
        "data_framing": parent.data_framing,
        "memory_as_data": parent.memory_as_data,
        "sandbox_level": max(level or 0, parent.sandbox_level),
        "contract": contract,
        "criteria": [
            {
                "id": f"c{number}",
                "description": text,
                "oracle": {"evaluator": True},
                "passes": False,
            }
            for number, text in enumerate(criteria, start=1)
        ],
    }
    if route.provider == "scripted":
        spec["script"] = _script(parent, name, problems)
    return {"input": spec, "caps": caps}


def _tools(parent: Spec, task: dict[str, Any], writes: bool, problems: list[str]) -> list[str]:
    """The child's allow-list: a subset of the parent's tools; read tools only for a reader."""
    mine = set(parent.tools)
    asked = task.get("tools")
    if asked is None:
        given = {
            name for name in mine if name not in (NAME, ADVISOR) and (writes or _reads_only(name))
        }
        return sorted(given)
    foreign = sorted(set(asked) - mine)
    if foreign:
        problems.append(
            f"tools {', '.join(foreign)} are not yours to give (yours: {', '.join(sorted(mine))})"
        )
    if not writes:
        writing = sorted(name for name in set(asked) & mine if not _reads_only(name))
        if writing:
            problems.append(
                f"tools {', '.join(writing)} change things, and a read-only worker gets only"
                " read tools: drop them, or make the task a writer (writes: true)"
            )
    return sorted(set(asked))


def _reads_only(name: str) -> bool:
    tool = registry.get(name)
    return tool is not None and tool.risk == Risk.READ and tool.effect == Effect.READ


def _route(
    parent: Spec, mission: Mission, role: str, task: dict[str, Any], problems: list[str]
) -> tuple[Route, dict[str, Any] | None]:
    """The child's model: the parent's offline model when it is scripted, else the role's
    route, else — its provider has no key — the other provider's (recorded as a failover)."""
    if parent.provider == "scripted":
        return Route("scripted", "scripted", None), None
    try:
        route = configured_route(mission, role)
    except MissionError as error:
        problems.append(str(error))
        return Route("scripted", "scripted", None), None
    if route.provider == "scripted":
        problems.append(
            f"role {role} is routed to the offline scripted model, which plays only a scripted"
            " parent's children"
        )
        return route, None
    if ready(route.provider):
        return route, None
    other = failover_for(route)
    if other is None:
        problems.append(
            f"role {role} is routed to {route.provider} ({route.model}), which cannot be called"
            " (no key or endpoint), and no other provider can take it over"
        )
        return Route("scripted", "scripted", None), None
    failover = {
        "from": {"provider": route.provider, "model": route.model},
        "to": {"provider": other.provider, "model": other.model},
        "reason": f"{route.provider} cannot be called (no key or endpoint)",
    }
    return other, failover


def _script(parent: Spec, name: str, problems: list[str]) -> dict[str, Any]:
    children = (parent.script or {}).get("children")
    script = children.get(name) if isinstance(children, dict) else None
    if not isinstance(script, dict):
        problems.append(
            f"the offline scripted model has no script for it: its parent's script needs"
            f" children[{name!r}] (a script of its own, with turns)"
        )
        return {}
    return script


def _micros(dollars: Any) -> int | None:
    if dollars is None:
        return None
    return max(1, round(float(dollars) * 1_000_000))


def _goal(contract: dict[str, Any], parent: Spec) -> str:
    """What the child is told: its task, how far it may go, where to start, when it is done,
    and the envelope to end with."""
    parts = [str(contract["objective"]).strip()]
    if contract["boundaries"]:
        parts.append("Boundaries:\n" + "\n".join(f"- {line}" for line in contract["boundaries"]))
    if contract["context"]:
        parts.append(
            "Context to start from (references):\n"
            + "\n".join(f"- {ref}" for ref in contract["context"])
        )
    if contract["context_mode"] == "fork":
        parts.append(f"Your parent's own goal, for context:\n{parent.goal.strip()}")
    elif contract["context_mode"] == "artifact_only":
        parts.append("Work from the referenced artifacts only (read_artifact).")
    parts.append(
        "Done when each of these holds:\n"
        + "\n".join(
            f"- c{number}: {text}" for number, text in enumerate(contract["done_criteria"], 1)
        )
    )
    parts.append(
        "When you are done, or cannot go further, answer with your result envelope only — one"
        ' JSON object: {"status": "done" | "partial" | "failed" | "blocked", "payload": {...},'
        ' "artifacts": [references], "evidence": {"commands": [commands you ran], "tests":'
        ' [tests that passed], "sources": [sources you cite]}, "open_questions": [...],'
        ' "error": "what is missing or went wrong (required unless done)"}. The payload must'
        " match this JSON Schema:\n"
        + json.dumps(contract["output_schema"], ensure_ascii=False, sort_keys=True)
    )
    return "\n\n".join(parts)


# --- envelopes -----------------------------------------------------------------------------------


def parse_envelope(text: str, contract: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    """A child's final answer as its result envelope, or (None, what is wrong with it)."""
    found = _json_object(text)
    if found is None:
        return None, "it is not a JSON object"
    error = _first_error(_ENVELOPE_VALIDATOR, found)
    if error:
        return None, f"the envelope is not valid: {error}"
    if found["status"] == "done":
        schema = (contract or {}).get("output_schema") or DEFAULT_OUTPUT_SCHEMA
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = _first_error(validator, found["payload"], at="payload")
        if error:
            return None, f"the payload does not match its schema: {error}"
    elif not str(found.get("error", "")).strip():
        return None, f"a {found['status']} envelope needs an error saying what is missing or wrong"
    evidence = found.get("evidence", {})
    return {
        "status": found["status"],
        "payload": found["payload"],
        "artifacts": found.get("artifacts", []),
        "evidence": {key: evidence.get(key, []) for key in ("commands", "tests", "sources")},
        "open_questions": found.get("open_questions", []),
        **({"error": found["error"]} if found.get("error") else {}),
    }, ""


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object of an answer: the whole text, or a fenced block, or from its first brace
    to its last (models, and the offline model's label, put words around it)."""
    stripped = text.strip()
    candidates = [stripped]
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", stripped, re.DOTALL)
    if fenced:
        candidates.append(fenced.group(1))
    if "{" in stripped:
        candidates.append(stripped[stripped.index("{") : stripped.rindex("}") + 1])
    for candidate in candidates:
        try:
            found = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def _first_error(validator: Any, instance: Any, *, at: str = "") -> str:
    if validator.is_valid(instance):
        return ""
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:  # pragma: no cover — is_valid said there is one
        return "invalid"
    where = "/".join([*([at] if at else []), *(str(part) for part in error.absolute_path)])
    return f"{where or '(root)'}: {error.message}"


def envelope_hook(answer: str, run_input: dict[str, Any]) -> str | None:
    """The stop hook `envelope`: a sub-agent ends only with a valid result envelope."""
    _envelope, problem = parse_envelope(answer, run_input.get("contract"))
    if not problem:
        return None
    return (
        f"your final answer must be your result envelope, one JSON object, and {problem}."
        " Answer again with the whole envelope."
    )


def _envelope_of(child: Run, name: str) -> dict[str, Any]:
    """What the parent sees of a child that ended: its own envelope when it ended done (and
    wrote one), else an envelope its run's status and record speak for."""
    output = child.output if isinstance(child.output, dict) else {}
    contract = (child.input or {}).get("contract") if isinstance(child.input, dict) else None
    head = {"name": name, "run": child.pk}
    if child.status == RunStatus.DONE:
        envelope, problem = parse_envelope(str(output.get("answer", "")), contract)
        if envelope is not None:
            return {**head, **envelope}
        return _ended(
            head, "failed", f"child run {child.pk} ended without a valid result envelope: {problem}"
        )
    if child.status == RunStatus.BUDGET_EXHAUSTED:
        return _ended(head, "budget_exhausted", _over_budget(child))
    if child.status == RunStatus.CANCELLED:
        return _ended(
            head, "cancelled", f"child run {child.pk} was cancelled ({child.error or 'stopped'})"
        )
    if child.status == RunStatus.PARTIAL:
        why = output.get("reason") or output.get("refused_by_stop_hook") or "it stopped early"
        return _ended(
            head, "partial", f"child run {child.pk} stopped without a result envelope: {why}"
        )
    if child.status == RunStatus.BLOCKED:
        why = (
            output.get("refused_by_stop_hook")
            or output.get("refusal")
            or output.get("reason")
            or "no reason given"
        )
        return _ended(head, "blocked", f"child run {child.pk} is blocked: {why}")
    return _ended(head, "failed", f"child run {child.pk} failed: {child.error or child.status}")


def _ended(head: dict[str, Any], status: str, error: str) -> dict[str, Any]:
    return {
        **head,
        "status": status,
        "payload": {},
        "artifacts": [],
        "evidence": {"commands": [], "tests": [], "sources": []},
        "open_questions": [],
        "error": error,
    }


def _over_budget(child: Run) -> str:
    """Which of its caps the child reached, in its own figures."""
    prefix = f"child run {child.pk} exceeded its budget"
    tokens = (
        child.input_tokens
        + child.output_tokens
        + child.cache_read_tokens
        + child.cache_write_tokens
    )
    if child.max_tokens is not None and tokens >= child.max_tokens:
        return f"{prefix}: {tokens} of {child.max_tokens} tokens"
    if child.max_usd_micros is not None and child.usd_micros >= child.max_usd_micros:
        return f"{prefix}: ${child.usd_micros / 1e6:.4f} of ${child.max_usd_micros / 1e6:.4f}"
    if child.max_seconds is not None and child.started_at is not None:
        ended = child.finished_at or timezone.now()
        seconds = int((ended - child.started_at).total_seconds())
        if seconds >= child.max_seconds:
            return f"{prefix}: {seconds} of {child.max_seconds} seconds"
    return f"{prefix}: {child.error or 'a budget above it was spent'}"
