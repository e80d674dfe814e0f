"""Skill tools for agents: `load_skill` reads a skill the run was offered at launch, and
`skill_propose` proposes a new one to the owner (docs/tools.md, "Skills").

`load_skill` only reads: the skill's `SKILL.md` body, or the text of one of its files, from the
commit the run was offered it at (the list frozen in the run's input, `Spec.skills`). It never
runs anything. What it returns was written by whoever wrote the project's repository or
proposed the skill: it reaches the model as a tool's output, in a data block (trust `tool`).
A skill's script runs only in the run's sandbox, with the shell tool: a repository skill's files
are in the run's worktree already (the worktree starts from the same commit); a memory skill's
are written there by the agent from what `load_skill` returned (write_file), then run.

`skill_propose` commits a proposal (`memory.skill_proposals`) that the owner approves on its diff
before any run is offered it: nothing it writes takes effect before then.
Registered with the tool registry by the app (`MemoryConfig.ready`).
"""

from __future__ import annotations

import json
from typing import Any

from kernel.models import Effect, Run
from memory import skill_proposals, skills
from memory.skills import SKILL_FILE, SkillError
from tools.base import Risk, Tool, ToolEnv, ToolError

NAME = {"type": "string", "pattern": r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$"}
TEXT_FILES = {
    "type": "object",
    "propertyNames": {"type": "string", "minLength": 1, "maxLength": skills.MAX_PATH},
    "additionalProperties": {"type": "string", "maxLength": skills.MAX_FILE},
    "maxProperties": skills.MAX_FILES - 1,
}


def _offered(env: ToolEnv) -> tuple[list[dict[str, Any]], str]:
    """The skills the run was offered at launch, and its project's repository."""
    given = Run.objects.filter(pk=env.run_id).values_list("input", flat=True).first()
    given = given if isinstance(given, dict) else {}
    listed = given.get("skills")
    return (listed if isinstance(listed, list) else []), str(given.get("repository") or "")


def _load(env: ToolEnv, arguments: dict[str, Any]) -> str:
    offered, repository_path = _offered(env)
    skill = next(
        (s for s in offered if isinstance(s, dict) and s.get("name") == arguments["name"]), None
    )
    if skill is None:
        names = ", ".join(str(s.get("name")) for s in offered if isinstance(s, dict)) or "none"
        raise ToolError(
            f"No skill {arguments['name']!r} was offered to this run (offered: {names})."
        )
    file = arguments.get("file", "")
    try:
        loaded = skills.load(skill, repository_path=repository_path, file=file)
    except SkillError as error:
        raise ToolError(str(error)) from None
    where = _where(skill)
    if file:
        return f"File {file} of skill {skill['name']} ({where}):\n{loaded.text}"
    listed = [
        f"- {path}" + (f" ({size} bytes)" if size >= 0 else "")
        for path, size in sorted(loaded.files.items())
        if path != SKILL_FILE
    ]
    files = "\n".join(listed) if listed else "(none)"
    return (
        f"Skill {skill['name']} ({where}).\n{loaded.text}\n\n"
        f"Its other files (load one with load_skill and `file`): \n{files}\n{_running(skill)}"
    )


def _where(skill: dict[str, Any]) -> str:
    commit = str(skill.get("commit", ""))[:12]
    if skill.get("source") == "repository":
        return f"the project's repository at {commit}, {skill['path']}/"
    return f"memory's skills scope at {commit}, approved by the owner"


def _running(skill: dict[str, Any]) -> str:
    if skill.get("source") == "repository":
        return (
            f"Its files are in your worktree under {skill['path']}/: run a script with the shell"
            " tool, in your sandbox."
        )
    return (
        f"Its files are not in your worktree: to run one, load it, write it with write_file (e.g."
        f" under .agents/skills/{skill['name']}/), and run it with the shell tool, in your sandbox."
    )


def _propose(env: ToolEnv, arguments: dict[str, Any]) -> str:
    header = {"name": arguments["name"], "description": arguments["description"]}
    text = "---\n" + "".join(f"{key}: {_quoted(value)}\n" for key, value in header.items())
    text += f"---\n{arguments.get('body', '').strip()}\n"
    files = {SKILL_FILE: text.encode()}
    for path, content in (arguments.get("files") or {}).items():
        files[path] = content.encode()
    try:
        proposal = skill_proposals.propose(
            files, author=f"run:{env.run_id}", source=f"run:{env.run_id}"
        )
    except SkillError as error:
        raise ToolError(str(error)) from None
    return (
        f"Proposed skill {proposal.name} as {proposal.id}: the owner approves it on its diff"
        " before any run is offered it."
    )


def _quoted(value: str) -> str:
    """A YAML scalar that cannot break the front matter: a JSON string (JSON is YAML)."""
    return json.dumps(" ".join(value.split()), ensure_ascii=False)


LOAD_SKILL = Tool(
    name="load_skill",
    description=(
        "Load a skill offered to this run (see the skills index): its SKILL.md instructions, or"
        " with `file` the text of one of its files (a path inside the skill). Loads only; run a"
        " skill's script with the shell tool."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "file": {"type": "string", "minLength": 1, "maxLength": skills.MAX_PATH},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_load,
    parallel_safe=True,
)
SKILL_PROPOSE = Tool(
    name="skill_propose",
    description=(
        "Propose a reusable skill (a name, a one-line description, Markdown instructions and"
        " optional text files such as scripts) for later runs: the owner approves it on its diff"
        " first."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "description": {"type": "string", "minLength": 1, "maxLength": skills.MAX_DESCRIPTION},
            "body": {"type": "string", "maxLength": 20_000},
            "files": TEXT_FILES,
        },
        "required": ["name", "description", "body"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,  # a proposal's name derives from its files: no double
    risk=Risk.WORKSPACE_WRITE,  # nothing takes effect before the owner approves it
    run=_propose,
)
SKILL_TOOLS = (LOAD_SKILL, SKILL_PROPOSE)
