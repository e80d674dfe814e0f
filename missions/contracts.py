"""A `delegate` call's typed contracts, and the plan they make (`plan`, one journaled step of
the parent's run): every contract validated against what the parent may give (its own tools, a
known role, a done criterion at least, a schema that is one, the depth of the run tree), and
each child routed — model and effort by role (`routing.route_for`), failing over to the other
provider when the role's own has no key (only here, at a sub-agent's boundary: a running
conversation never changes provider), the scripted model when the parent is scripted (the child
plays `script["children"][name]`). Any refusal is one precise error naming every problem found.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from kernel.context import RunContext
from kernel.models import Effect
from kernel.runs import MAX_DEPTH
from memory.skill_tools import LOAD_SKILL
from missions.engine import outage
from missions.engine.spec import Spec
from missions.envelopes import DEFAULT_OUTPUT_SCHEMA, HOOK
from missions.errors import MissionError
from missions.models import Mission, Role
from missions.providers.registry import ready
from missions.routing import Route, configured_route, failover_for
from tools import levels, registry
from tools.base import Risk, Worksite

# The tools a sub-agent is not given unless its contract lists them (`missions.delegation`).
NAME = "delegate"
ADVISOR = "consult_advisor"
DEFAULT_TURNS = 30
EFFORTS = ("low", "medium", "high")
CONTEXT_MODES = ("fresh", "fork", "artifact_only")
ARTIFACT = re.compile(r"^[0-9a-f]{64}$")

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

INSTRUCTIONS = """\
You are a sub-agent: another agent gave you one task under a contract. Work only on it, within
its boundaries, with the tools you are given. Your final answer is your result envelope, a JSON
object and nothing else; your parent sees only that envelope, never your conversation."""
WRITER_INSTRUCTIONS = """\
You work in a repository of your own, made from your parent's files, mounted at /workspace in the
sandbox where the shell tool runs commands. Commit your work with git_commit on your branch;
your parent merges it. Do not push."""


def plan(ctx: RunContext, worksite: Worksite, tasks: list[dict[str, Any]]) -> dict[str, Any]:
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
        child = _child(ctx, worksite, parent, mission, task, found)
        problems.extend(f"task {task['name']!r}: {problem}" for problem in found)
        children.append(child)
    if problems:
        return {"refused": "delegate refused, nothing was started: " + "; ".join(problems) + "."}
    return {"children": children}


def _child(
    ctx: RunContext,
    worksite: Worksite,
    parent: Spec,
    mission: Mission,
    task: dict[str, Any],
    problems: list[str],
) -> dict[str, Any]:
    """The child's run input and caps; what is wrong with the task goes to `problems` (in the
    order the task's fields are checked: the refusal names them so)."""
    name = str(task["name"])
    writes = bool(task.get("writes", False))
    mode = task.get("context_mode", "fresh")
    role = task.get("role", "executor")
    criteria = _criteria(task, problems)
    schema = _output_schema(task, problems)
    tools = _tools(parent, task, writes, problems)
    references = [str(ref) for ref in task.get("context", [])]
    if mode == "artifact_only":
        _check_artifacts(references, problems)
        tools = sorted({*tools, "read_artifact"})
    level = task.get("sandbox_level")
    _check_place(worksite, parent, writes, mode, level, problems)
    route, failover = _route(parent, mission, role, task, problems)
    budget = task.get("budget", {})
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
    spec = _input(parent, contract, route)
    if route.provider == "scripted":
        spec["script"] = _script(parent, name, problems)
    return {"input": spec, "caps": _caps(budget)}


def _input(parent: Spec, contract: dict[str, Any], route: Route) -> dict[str, Any]:
    """The child's run input (a `Spec`): its contract, routed, with what it inherits."""
    writes = contract["writes"]
    level = contract["sandbox_level"]
    # The parent's MCP tools it gives, as the parent froze them (the registry knows none).
    mcp = [tool for tool in parent.mcp_tools if tool["name"] in contract["tools"]]
    given = {tool["name"] for tool in mcp}
    return {
        "goal": _goal(contract, parent),
        "provider": route.provider,
        "model": route.model,
        "role": contract["role"],
        "effort": contract["effort"] or route.effort,
        "thinking": route.provider != "scripted",
        "tools": [name for name in contract["tools"] if name not in given],
        **({"mcp_tools": mcp} if mcp else {}),
        "constraints": list(contract["boundaries"]),
        "max_turns": int(contract["budget"].get("turns", DEFAULT_TURNS)),
        "stop_hook": HOOK,
        "instructions": INSTRUCTIONS + (f"\n\n{WRITER_INSTRUCTIONS}" if writes else ""),
        "memory_index": parent.memory_index,
        "repository": "" if contract["context_mode"] == "artifact_only" else parent.repository,
        "base": parent.base,
        "checkpoints": writes and parent.checkpoints,
        "data_framing": parent.data_framing,
        "memory_as_data": parent.memory_as_data,
        "sandbox_level": max(level or 0, parent.sandbox_level),
        # Only when set: a child of a run without them keeps its former input.
        **(
            {"skills": parent.skills}
            if parent.skills and LOAD_SKILL.name in contract["tools"]
            else {}
        ),
        **({"sensitive": True} if parent.sensitive else {}),
        # Only when set, likewise: a child of a run without it keeps its former input.
        **({"cache_aware_clearing": True} if parent.cache_aware_clearing else {}),
        "contract": contract,
        "criteria": [
            {
                "id": f"c{number}",
                "description": text,
                "oracle": {"evaluator": True},
                "passes": False,
            }
            for number, text in enumerate(contract["done_criteria"], start=1)
        ],
    }


def _criteria(task: dict[str, Any], problems: list[str]) -> list[str]:
    criteria = [str(text).strip() for text in task.get("done_criteria", [])]
    if not criteria or not all(criteria):
        problems.append(
            "no done criteria: a task is delegated only with at least one done criterion"
            " (done_criteria: checkable statements of when it is done)"
        )
    return criteria


def _output_schema(task: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    schema: dict[str, Any] = task.get("output_schema", DEFAULT_OUTPUT_SCHEMA)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
        if schema.get("type", "object") != "object":
            problems.append("output_schema must describe an object (the payload is one)")
    except jsonschema.exceptions.SchemaError as error:
        problems.append(f"output_schema is not a valid JSON Schema: {error.message}")
    return schema


def _check_artifacts(references: list[str], problems: list[str]) -> None:
    strange = [ref for ref in references if not ARTIFACT.match(ref)]
    if strange or not references:
        problems.append(
            "context_mode artifact_only needs context to be artifact ids (sha256 hex)"
            + (f", not {', '.join(strange[:3])}" if strange else "")
        )


def _check_place(
    worksite: Worksite,
    parent: Spec,
    writes: bool,
    mode: str,
    level: int | None,
    problems: list[str],
) -> None:
    """Where the child would work: a writer needs a repository and a sandbox, and no child works
    less confined than its parent."""
    if writes and (worksite.workspace is None or not parent.repository):
        problems.append("writes: true needs a repository, and this run has none")
    if writes and mode == "artifact_only":
        problems.append("a writer works in a repository: context_mode artifact_only is read-only")
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


def _caps(budget: dict[str, Any]) -> dict[str, Any]:
    """The child's kernel caps from its contract's budget (turns are the loop's)."""
    return {
        cap: value
        for cap, value in (
            ("max_tokens", budget.get("tokens")),
            ("max_usd_micros", _micros(budget.get("dollars"))),
            ("max_seconds", budget.get("seconds")),
        )
        if value is not None
    }


def _tools(parent: Spec, task: dict[str, Any], writes: bool, problems: list[str]) -> list[str]:
    """The child's allow-list: a subset of the parent's tools; read tools only for a reader."""
    mine = set(parent.tools) | {tool["name"] for tool in parent.mcp_tools}
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
    tool = registry.TOOLS.get(name)
    return tool is not None and tool.risk == Risk.READ and tool.effect == Effect.READ


def _route(
    parent: Spec, mission: Mission, role: str, task: dict[str, Any], problems: list[str]
) -> tuple[Route, dict[str, Any] | None]:
    """The child's model: the parent's offline model when it is scripted, else the role's
    route, else — its provider has no key, or is in an outage another run is waiting out
    (`outage.provider_down`) — the other provider's (recorded as a failover). Planned in a
    journaled step: a replay routes the child the same way whatever the providers do since."""
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
    down = outage.provider_down(route.provider) if ready(route.provider) else None
    if ready(route.provider) and down is None:
        return route, None
    other = failover_for(route)
    if other is None and down is not None:
        return route, None  # nothing to fail over to: the child waits the outage out itself
    if other is None:
        problems.append(
            f"role {role} is routed to {route.provider} ({route.model}), which cannot be called"
            " (no key or endpoint), and no other provider can take it over"
        )
        return Route("scripted", "scripted", None), None
    failover = {
        "from": {"provider": route.provider, "model": route.model},
        "to": {"provider": other.provider, "model": other.model},
        "reason": f"{route.provider} cannot be called (no key or endpoint)"
        if down is None
        else f"{down}: a run is waiting it out",
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
