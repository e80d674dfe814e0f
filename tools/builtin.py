"""Built-in tools: the small ones here (`noop` is for the engine's tests and benchmark, and the
smallest example of a tool), and the families from their modules."""

from __future__ import annotations

import json
from typing import Any

from kernel import artifacts
from kernel.models import Artifact, Effect, Run
from tools.base import Risk, Tool, ToolEnv
from tools.files import FILE_TOOLS
from tools.git import GIT_TOOLS
from tools.mcp import toolset
from tools.merging import MERGE_WORK
from tools.registry import TOOLS
from tools.shell import SHELL


def _noop(env: ToolEnv, arguments: dict[str, Any]) -> str:
    return f"ok {arguments.get('note', '')}".strip()


NOOP = Tool(
    name="noop",
    description="Does nothing and answers 'ok'. For tests and benchmarks.",
    input_schema={
        "type": "object",
        "properties": {"note": {"type": "string", "maxLength": 200}},
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_noop,
)


def _read_artifact(env: ToolEnv, arguments: dict[str, Any]) -> str:
    """Only the artifacts of the calling run's account, i.e. its mission (its runs' offloaded
    outputs, previews): another mission's answers exactly as a missing one, so existence is not
    confirmed either."""
    account_id = Run.objects.values_list("account_id", flat=True).get(pk=env.run_id)
    found = Artifact.objects.filter(sha256=arguments["sha256"], run__account_id=account_id).first()
    if found is None:
        return f"No artifact {arguments['sha256']}."
    with artifacts.open_artifact(found) as handle:
        handle.seek(arguments.get("offset", 0))
        chunk = handle.read(arguments.get("length", 8000))
    return chunk.decode(errors="replace")


READ_ARTIFACT = Tool(
    name="read_artifact",
    description=(
        "Read part of an artifact of this mission (e.g. an offloaded tool output) by its sha256."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "offset": {"type": "integer", "minimum": 0},
            "length": {"type": "integer", "minimum": 1, "maximum": 50000},
        },
        "required": ["sha256"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_read_artifact,
)


def _load_tool_schema(env: ToolEnv, arguments: dict[str, Any]) -> str:
    # An MCP tool's is the one frozen into the run (`tools.mcp.toolset`), not a registry's.
    if arguments["name"].startswith(toolset.PREFIX):
        found = toolset.schema_of(env.run_id, arguments["name"])
        return json.dumps(found) if found else f"No tool named {arguments['name']!r}."
    tool = TOOLS.get(arguments["name"])
    if tool is None:
        return f"No tool named {arguments['name']!r}."
    return json.dumps({"name": tool.name, "input_schema": tool.input_schema})


# Offered to a run that has deferred tools: their schemas load on demand, as a tool result
# appended to the conversation, so the frozen prefix never changes.
LOAD_TOOL_SCHEMA = Tool(
    name="load_tool_schema",
    description="Get the input schema of a tool listed without one, before calling it.",
    input_schema={
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 100}},
        "required": ["name"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    parallel_safe=True,
    run=_load_tool_schema,
)


_FAMILIES = [*FILE_TOOLS, SHELL, *GIT_TOOLS]
# Added to the registry by the tools app's `ready()`.
BUILTIN = [NOOP, READ_ARTIFACT, LOAD_TOOL_SCHEMA, *_FAMILIES, MERGE_WORK]
# What a run that delegates to writer sub-agents gets besides: merging their work.
MERGING_TOOLS = [MERGE_WORK.name]
# What a coding mission gets unless it says otherwise: the workspace tools, and the owner tools
# the approvals app registers (`approvals.tools`).
CODING_TOOLS = [
    *(tool.name for tool in _FAMILIES),
    "ask_owner",
    "request_approval",
    "notify_owner",
]
