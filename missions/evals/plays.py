"""The figures and citations kinds of task (`missions.evals.suite`): their task.json schemas, and
the scripts the offline model plays for a citations task.

A figures task is played as a research one: read the data, compute in the sandbox (the plan's
command prints the figures, as JSON), answer with what the sandbox printed.

A citations task: read the documents of the repository, fetch the pages of the task's site
(`web_fetch`, whose quarantined reader plays the quotes the plan cites from those pages: the
tool keeps only those it finds on the page), then answer — the plan's answer, the pages' checked
facts as `web_fetch` returned them, and the repository passages the plan cites, as JSON. The
oracle, not the script, decides whether each quote is really there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from missions.evals.suite import Task

SITE = "{site}"  # in a task.json, the address the evaluation serves the task's site/ at
NAME = {"type": "string", "pattern": r"^[A-Za-z][A-Za-z0-9_]{0,63}$"}
TOLERANCE = {"type": "number", "minimum": 0}
_FIGURE = {
    "type": "object",
    "properties": {
        "name": NAME,
        "value": {"type": "number"},
        "abs": TOLERANCE,
        "rel": TOLERANCE,
        "label": {"type": "string", "minLength": 1, "maxLength": 200},
    },
    "required": ["name", "value"],
    # One tolerance, said: an exact float is never what an analysis is judged on.
    "oneOf": [{"required": ["abs"]}, {"required": ["rel"]}],
    "additionalProperties": False,
}
_CITATION = {
    "type": "object",
    "properties": {
        "quote": {"type": "string", "minLength": 12, "maxLength": 500},
        "path": {"type": "string", "minLength": 1},
        "url": {"type": "string", "minLength": 1},
    },
    "required": ["quote"],
    "oneOf": [{"required": ["path"]}, {"required": ["url"]}],
    "additionalProperties": False,
}
_FETCH = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "pattern": r"^\{site\}/"},
        "question": {"type": "string", "minLength": 1},
    },
    "required": ["url", "question"],
    "additionalProperties": False,
}


def schemas(common: dict[str, Any], strings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The task.json schemas of the kinds figures and citations (`common`: every kind's keys)."""
    research_plan = {
        "type": "object",
        "properties": {
            "read": {**strings, "minItems": 1},
            "command": {"type": "string", "minLength": 1},
            "explain": {"type": "string", "minLength": 1},
        },
        "required": ["read", "command", "explain"],
        "additionalProperties": False,
    }
    figures = {
        "type": "object",
        "properties": {
            **common,
            "oracle": {
                "type": "object",
                "properties": {"figures": {"type": "array", "items": _FIGURE, "minItems": 1}},
                "required": ["figures"],
                "additionalProperties": False,
            },
            "plan": research_plan,
        },
        "required": ["kind", "title", "goal", "done", "oracle", "plan"],
        "additionalProperties": False,
    }
    citations = {
        "type": "object",
        "properties": {
            **common,
            "oracle": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string", "minLength": 1, "maxLength": 200},
                    "accept": strings,
                    "sources": {**strings, "minItems": 1},
                    "min_citations": {"type": "integer", "minimum": 1, "maximum": 20},
                },
                "required": ["answer", "sources"],
                "additionalProperties": False,
            },
            "plan": {
                "type": "object",
                "properties": {
                    "read": strings,
                    "fetch": {"type": "array", "items": _FETCH},
                    "answer": {"type": "string", "minLength": 1},
                    "citations": {"type": "array", "items": _CITATION, "minItems": 1},
                },
                "required": ["read", "answer", "citations"],
                "additionalProperties": False,
            },
        },
        "required": ["kind", "title", "goal", "done", "oracle", "plan"],
        "additionalProperties": False,
    }
    return {"figures": figures, "citations": citations}


def paths_named(data: dict[str, Any]) -> list[str]:
    """The repository files a citations task names besides those it reads: its sources and the
    passages its plan cites (each must exist)."""
    if data.get("kind") != "citations":
        return []
    sources = [source for source in data["oracle"]["sources"] if not is_url(source)]
    return [*sources, *(c["path"] for c in data["plan"]["citations"] if "path" in c)]


def is_url(source: str) -> bool:
    return source.startswith((f"{SITE}/", "http://", "https://"))


def uses_site(data: dict[str, Any]) -> bool:
    """Whether a task.json names pages of its site (which it must then ship)."""
    return SITE in json.dumps(data)


def at_site(value: Any, base: str) -> Any:
    """`value` (JSON) with `{site}` replaced by the address the task's pages are served at."""
    return json.loads(json.dumps(value).replace(SITE, base))


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


Reader = Callable[..., tuple[dict[str, Any], dict[str, Any]]]


def citations(task: Task, *, multi: bool, reader: Reader) -> dict[str, Any]:
    """Read (alone, or by read-only workers), fetch the pages, answer with the cited passages."""
    plan = task.plan
    turns: list[dict[str, Any]] = [
        {"text": "Looking at the documents.", "tool_calls": [_call("list_files", depth=3)]}
    ]
    children: dict[str, Any] = {}
    if plan["read"] and multi:
        contract, script = reader(
            "documents",
            f"Read these documents and quote what bears on: {task.goal}",
            plan["read"],
            {"read": plan["read"]},
            {"type": "object", "properties": {"read": {"type": "array"}}, "required": ["read"]},
        )
        turns.append({"text": "A worker reads the documents.", "tool_calls": [
            _call("delegate", tasks=[contract])
        ]})  # fmt: skip
        children[contract["name"]] = script
    elif plan["read"]:
        reads = [_call("read_file", path=path) for path in plan["read"]]
        turns.append({"text": "Reading the relevant documents.", "tool_calls": reads})
    pages = plan.get("fetch", [])
    answer = plan["answer"]
    if pages:
        fetches = [_call("web_fetch", url=page["url"], question=page["question"]) for page in pages]
        turns.append({"text": "Reading the pages, through the reader.", "tool_calls": fetches})
        at = len(turns)
        checked = "\n".join(f"{{output:{at}.{n}}}" for n in range(1, len(pages) + 1))
        answer += f"\n\nFrom the pages (as web_fetch checked them):\n{checked}"
        # The reader of every page plays the same answer: the facts quoting another page are
        # not on this one, and web_fetch drops them.
        facts = [
            {"fact": plan["answer"], "quote": c["quote"], "url": c["url"]}
            for c in plan["citations"]
            if "url" in c
        ]
        children["reader"] = {"turns": [{"text": json.dumps({"facts": facts})}]}
    cited = [c for c in plan["citations"] if "path" in c]
    if cited:
        answer += "\n\nFrom the documents:\n" + json.dumps({"citations": cited}, indent=1)
    turns.append({"text": answer, "on_error": {"text": "No answer: {error}"}})
    return {"turns": turns, **({"children": children} if children else {})}
