"""The domain profiles a new installation starts with (`missions.profiles`), seeded by a data
migration and, after a flush, by the tests. The owner edits them on Agents & policies.

Their routes name only an effort (the roles' default models at that effort), so that they run on
whatever provider the owner set. Every profile works at sandbox level 1 at least: its suite runs
commands in the sandbox (`missions.evals`). Research and analysis allow no push, merge or new
mission; programming and automation take every tool their level allows.
"""

from __future__ import annotations

from typing import Any

READING: list[str] = [
    "read_file",
    "list_files",
    "search",
    "shell",
    "write_file",
    "edit_file",
    "git_status",
    "git_log",
    "git_diff",
    "web_fetch",
    "web_search",
    "memory_index",
    "memory_search",
    "memory_open",
    "memory_write",
    "memory_propose",
    "ledger_view",
    "ledger_plan",
    "ledger_update",
    "ledger_fact",
    "delegate",
    "consult_advisor",
    "ask_owner",
    "notify_owner",
    "request_approval",
    "read_artifact",
    "load_tool_schema",
]

PROFILES: list[dict[str, Any]] = [
    {
        "name": "research",
        "description": "Questions answered from documents and the Web, each claim with its source.",
        "routes": {"planner": {"effort": "high"}, "executor": {"effort": "high"}},
        "tools": READING,
        "criteria": [
            "Each claim in the answer cites the passage it rests on and where it was read.",
            "The answer says plainly what could not be established.",
        ],
        "max_tokens": 2_000_000,
        "max_usd_micros": 5_000_000,
        "max_seconds": 3600,
    },
    {
        "name": "programming",
        "description": "Changes to a project's code, tested and committed.",
        "routes": {"executor": {"effort": "medium"}},
        "tools": [],
        "criteria": [
            "The project's tests pass on the committed change.",
            "The change is committed with a message that says why.",
        ],
        "max_tokens": 5_000_000,
        "max_usd_micros": 10_000_000,
        "max_seconds": 7200,
    },
    {
        "name": "analysis",
        "description": "Data and financial analysis: figures computed by commands, never guessed.",
        "routes": {"executor": {"effort": "high"}},
        "tools": [*READING, "git_commit"],
        "criteria": [
            "Each figure in the answer is computed by a command whose output is shown.",
            "Each figure states its unit and the period or rows it covers.",
        ],
        "max_tokens": 3_000_000,
        "max_usd_micros": 5_000_000,
        "max_seconds": 3600,
    },
    {
        "name": "automation",
        "description": "Repetitive operations carried out step by step, each effect checked.",
        "routes": {"executor": {"effort": "low"}},
        "tools": [],
        "criteria": [
            "Each action's effect was checked after it ran.",
            "Nothing outside the task's scope was changed.",
        ],
        "max_tokens": 1_000_000,
        "max_usd_micros": 2_000_000,
        "max_seconds": 1800,
    },
]


def seed(profile_model: Any) -> None:
    """Create the profiles that do not exist (idempotent; an owner's edits are kept)."""
    for values in PROFILES:
        fields = {key: value for key, value in values.items() if key != "name"}
        profile_model.objects.get_or_create(name=values["name"], defaults=fields)
