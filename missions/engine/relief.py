"""Relieving the context, in tiers (DESIGN.md §3): offload big tool results to artifacts, and
compact the conversation into our structured summary when it nears the model's window.

Sizes come from the provider's own usage figures where we have them (the input tokens it counted
for the last request) plus an estimate for what was appended since: 4 characters a token, the
usual figure for English text and JSON, erring on the side of compacting early.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kernel import artifacts
from kernel.models import Run

CHARS_PER_TOKEN = 4
OFFLOAD_TOKENS = 3000  # a tool result larger than this goes to an artifact
PREVIEW_CHARS = 1500
COMPACT_AT = 0.55  # of the model's window: between DESIGN.md's 50 and 60 %
DEFAULT_WINDOW = 200_000  # when the catalog does not know the model's window


def estimate_tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return len(text) // CHARS_PER_TOKEN + 1


def offload(output: str, *, tool: str, run: Run) -> str:
    """The output itself if small; else a preview and where the whole output is kept."""
    if estimate_tokens(output) <= OFFLOAD_TOKENS:
        return output
    stored = artifacts.store(
        content=output.encode(), name=f"{tool} output", media_type="text/plain", run=run
    )
    return (
        f"{output[:PREVIEW_CHARS]}\n[... output of {len(output)} characters offloaded to artifact"
        f" {stored.sha256}; read more with read_artifact(sha256, offset, length)]"
    )


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


def summary_message(verbatim: Verbatim, narrative: str, *, compactions: int) -> str:
    return (
        f"# Working summary after compaction {compactions}\n\n{verbatim.render()}\n\n"
        f"## Progress so far (written by the model)\n{narrative.strip()}"
    )
