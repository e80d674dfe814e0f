"""Relieving the context, in tiers (DESIGN.md §3): offload big tool results to artifacts, and
compact the conversation into our structured summary when it nears the model's window.

Sizes come from the provider's own usage figures where we have them (the input tokens it counted
for the last request) plus an estimate for what was appended since: 4 characters a token, the
usual figure for English text and JSON, erring on the side of compacting early.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel import artifacts
from kernel.models import Artifact, Run
from missions.providers.base import ServerClearing

CHARS_PER_TOKEN = 4
OFFLOAD_TOKENS = 3000  # a tool result larger than this goes to an artifact
PREVIEW_CHARS = 1500
CLEAR_AT = 0.40  # of the window: clear old tool results before compaction is needed
KEEP_RECENT_RESULTS = 4  # the latest tool results stay in full
CLEAR_BATCH = 4  # clear at least this many at once: each clearing rewrites the cached prefix
COMPACT_AT = 0.55  # of the model's window: between DESIGN.md's 50 and 60 %
DEFAULT_WINDOW = 200_000  # when the catalog does not know the model's window
# Server-side clearing: at least this share of the window at a time (the batch's reason).
SERVER_CLEAR_AT_LEAST = 0.05


def estimate_tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return len(text) // CHARS_PER_TOKEN + 1


def offload(output: str, *, tool: str, run: Run) -> str:
    """The output itself if small; else a preview and where the whole output is kept."""
    if estimate_tokens(output) <= OFFLOAD_TOKENS:
        return output
    content = output.encode()
    stored = artifacts.store(
        content=content, name=f"{tool} output", media_type="text/plain", run=run
    )
    if not _of_mission(stored, run):
        # The same bytes were stored first for another mission, and `read_artifact` reads only
        # a mission's own: this mission gets its own copy, told apart at the end (offsets into
        # the output stay the same) by a token nobody can have stored before.
        content += f"\n[a copy for run {run.pk}: {secrets.token_hex(8)}]".encode()
        stored = artifacts.store(
            content=content, name=f"{tool} output", media_type="text/plain", run=run
        )
    return (
        f"{output[:PREVIEW_CHARS]}\n[... output of {len(output)} characters offloaded to artifact"
        f" {stored.sha256}; read more with read_artifact(sha256, offset, length)]"
    )


def _of_mission(artifact: Artifact, run: Run) -> bool:
    if artifact.run_id is None:
        return False
    if artifact.run_id == run.pk:
        return True
    return Run.objects.filter(pk=artifact.run_id, mission_id=run.mission_id).exists()


@dataclass(frozen=True)
class Verbatim:
    """What a compaction must keep word for word: written by the harness, not by the model."""

    goal: str
    constraints: list[str]
    owner_messages: list[str]

    def render(self) -> str:
        lines = ["## Goal (verbatim)", self.goal, "", "## Constraints (verbatim)"]
        lines += [f"- {c}" for c in self.constraints] or ["(none)"]
        lines += ["", "## Owner instructions (verbatim, oldest first)"]
        lines += [f"- {m}" for m in self.owner_messages] or ["(none)"]
        return "\n".join(lines)


COMPACTION_SYSTEM = """\
You write the working summary of an agent's run, so the run can continue from it alone.
Use exactly these headings: Decisions; Files touched; Verified facts (with step numbers); Open
problems; Next steps. Keep error messages, ids and paths verbatim. Do not restate the goal,
constraints or owner instructions: they are kept separately, word for word."""


def summary_message(
    verbatim: Verbatim, narrative: str, *, compactions: int, files: dict[str, str] | None = None
) -> str:
    parts = [
        f"# Working summary after compaction {compactions}",
        verbatim.render(),
        f"## Progress so far (written by the model)\n{narrative.strip()}",
    ]
    for name, text in (files or {}).items():
        parts.append(f"## {name} (re-read from the workspace)\n{text}")
    return "\n\n".join(parts)


# What a compaction re-reads from the run's workspace: instructions, plan, progress, notes.
REHYDRATE_FILES = ("AGENTS.md", "CLAUDE.md", "PROGRESS.md", "todo.md", "notes.md")
REHYDRATE_CHARS = 4000  # per file: enough for a table of contents or a plan, not a dump


def rehydrate(workspace: str) -> dict[str, str]:
    """The working files present in `workspace`, each capped, in a fixed order."""
    if not workspace:
        return {}
    root = Path(workspace)
    found: dict[str, str] = {}
    for name in REHYDRATE_FILES:
        path = root / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            found[name] = text[:REHYDRATE_CHARS] + (
                f"\n[... {len(text) - REHYDRATE_CHARS} more characters]"
                if len(text) > REHYDRATE_CHARS
                else ""
            )
    return found


def supports_server_clearing(capabilities: dict[str, Any], strategy: str | None) -> bool:
    """Whether a model listing's capabilities offer the context-editing `strategy` (Anthropic
    lists them under `context_management`)."""
    editing = capabilities.get("context_management")
    offered = editing.get(strategy) if isinstance(editing, dict) and strategy else None
    return isinstance(offered, dict) and offered.get("supported") is True


def server_clearing(window: int) -> ServerClearing:
    """The provider clears where we would have (`CLEAR_AT`), keeping as many recent results."""
    return ServerClearing(
        trigger_tokens=int(CLEAR_AT * window),
        keep=KEEP_RECENT_RESULTS,
        clear_at_least_tokens=int(SERVER_CLEAR_AT_LEAST * window),
    )


CLEARED = "[tool result cleared to save context; the full result is in the run's journal]"


def clear_old_tool_results(items: list[dict[str, Any]]) -> int:
    """Replace the content of all but the latest tool results with a short placeholder, in one
    batch; return how many were cleared (0 when fewer than a batch are old enough).

    Knows the three native formats: Anthropic `tool_result` blocks, OpenAI
    `function_call_output` items, scripted `tool` items. A pure function of the conversation, so
    a replay clears exactly the same results.
    """
    old = _old_results(items)
    if len(old) < CLEAR_BATCH:
        return 0
    for holder, key in old:
        holder[key] = CLEARED
    return len(old)


def clearable(items: list[dict[str, Any]]) -> bool:
    """Whether `clear_old_tool_results` would clear a batch now."""
    return len(_old_results(items)) >= CLEAR_BATCH


def _old_results(items: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    slots = [slot for item in items for slot in _result_slots(item)]
    return [slot for slot in slots[:-KEEP_RECENT_RESULTS] if slot[0][slot[1]] != CLEARED]


def _result_slots(item: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    if item.get("type") == "function_call_output":  # OpenAI
        return [(item, "output")]
    if item.get("role") == "tool":  # scripted
        return [(item, "output")]
    content = item.get("content")
    if item.get("role") == "user" and isinstance(content, list):  # Anthropic
        return [(block, "content") for block in content if block.get("type") == "tool_result"]
    return []
