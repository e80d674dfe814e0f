"""Tools by name; a run's tool list is frozen, in a deterministic order, when it starts."""

from __future__ import annotations

import hashlib
import json

from tools.base import Tool

_TOOLS: dict[str, Tool] = {}


def _builtins() -> dict[str, Tool]:
    if not _TOOLS:
        from tools.builtin import BUILTIN

        for tool in BUILTIN:
            _TOOLS[tool.name] = tool
    return _TOOLS


def register(tool: Tool) -> Tool:
    _builtins()
    if tool.name in _TOOLS and _TOOLS[tool.name] is not tool:
        raise ValueError(f"A tool named {tool.name!r} is already registered.")
    _TOOLS[tool.name] = tool
    return tool


def get(name: str) -> Tool | None:
    return _builtins().get(name)


def every() -> list[Tool]:
    """Every registered tool (the built-ins and those the apps registered), in no set order."""
    return list(_builtins().values())


def frozen(names: list[str]) -> list[Tool]:
    """The run's tools, sorted by name: the same list, in the same order, on every turn."""
    missing = sorted(set(names) - set(_builtins()))
    if missing:
        raise ValueError(f"Unknown tool(s): {', '.join(missing)}.")
    return [_TOOLS[name] for name in sorted(set(names))]


def fingerprint(tools: list[Tool]) -> str:
    """The hash a run records of its tool list (names, descriptions, schemas)."""
    body = json.dumps(
        [[t.name, t.description, t.input_schema, t.effect] for t in tools], sort_keys=True
    )
    return hashlib.sha256(body.encode()).hexdigest()
