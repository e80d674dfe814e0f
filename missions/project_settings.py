"""A project's settings for long work (docs/design.md §12, §19): the owner's instructions, the
criteria a mission that gives none is held to, and the smoke command the resume routine runs
(`missions.engine.resume`). The console's form and `PATCH /api/v1/projects/{id}` call
`configure`; the owner's "Import from AGENTS.md" calls `import_instructions`.

What reaches a run's system prompt is only what the owner saved: the repository's AGENTS.md (or
CLAUDE.md) is read at the default branch head, pinned in the host-owned staging repository, and
only when the owner asks — never from a run's worktree, which its agent writes. Reads go through
bounded git on that staging repository (`tools.bounded_git`): no checkout, nothing interpreted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentos.core import audit
from agentos.core.models import AuditEvent
from missions import verification
from missions.errors import MissionError
from missions.models import Project
from tools import bounded_git, workspace
from tools.base import ToolError

MAX_INSTRUCTIONS = 20_000  # characters: read by every turn of every run of the project
MAX_SMOKE = 2_000
INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")  # the first found at the default branch head
PIN_REF = "refs/agentos/instructions/project-{id}"
REGULAR = ("100644", "100755")
_ENTRY = re.compile(rb"^(\d{6}) (\w+) ([0-9a-f]{40,64})\t(.+)$")


@dataclass(frozen=True)
class Unset:
    """A field the change leaves as it is."""


UNSET = Unset()


def configure(
    project: Project,
    *,
    who: audit.Actor,
    instructions: str | Unset = UNSET,
    default_criteria: Any = UNSET,
    smoke_command: str | Unset = UNSET,
) -> Project:
    """The owner's change of the given fields, each validated first: a `MissionError` (422)
    naming every field that is wrong, and nothing written then."""
    changes = validate(
        has_repository=bool(project.repository),
        instructions=instructions,
        default_criteria=default_criteria,
        smoke_command=smoke_command,
    )
    return _save(project, changes, who=who, change="saved")


def validate(
    *,
    has_repository: bool,
    instructions: str | Unset = UNSET,
    default_criteria: Any = UNSET,
    smoke_command: str | Unset = UNSET,
) -> dict[str, Any]:
    """The given fields as they are saved, or a `MissionError` (422) naming every field that is
    wrong (a project being created is checked before anything of it is made)."""
    changes: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    if not isinstance(instructions, Unset):
        text = instructions.replace("\r\n", "\n").strip()
        if len(text) > MAX_INSTRUCTIONS:
            errors["instructions"] = [f"At most {MAX_INSTRUCTIONS:,} characters."]
        elif "\x00" in text:
            errors["instructions"] = ["No NUL character."]
        else:
            changes["instructions"] = text
            changes["instructions_from"] = ""  # the owner's own words now
    if not isinstance(default_criteria, Unset):
        try:
            changes["default_criteria"] = _criteria(has_repository, default_criteria)
        except verification.CriteriaError as error:
            errors["default_criteria"] = [error.message]
    if not isinstance(smoke_command, Unset):
        command = smoke_command.replace("\r\n", "\n").strip()
        if len(command) > MAX_SMOKE or "\x00" in command:
            errors["smoke_command"] = [f"At most {MAX_SMOKE:,} characters, no NUL."]
        elif command and not has_repository:
            errors["smoke_command"] = [
                "A smoke command runs in a run's worktree: this project has no repository."
            ]
        else:
            changes["smoke_command"] = command
    if errors:
        fields = "; ".join(f"{name}: {' '.join(found)}" for name, found in errors.items())
        raise MissionError(
            f"The project's settings are not valid: {fields}",
            code="invalid_input",
            status=422,
            details={"fields": errors},
        )
    return changes


def save(project: Project, changes: dict[str, Any], *, who: audit.Actor) -> Project:
    """Fields `validate` returned, saved (a project just created: its settings)."""
    return _save(project, changes, who=who, change="saved")


def import_instructions(project: Project, *, who: audit.Actor) -> Project:
    """The owner's act: the project's instructions become its repository's AGENTS.md (else
    CLAUDE.md) as the default branch head holds it now, a regular file read whole or refused.
    `MissionError` (422) when there is no repository, no commit, no such file, or one too big."""
    if not project.repository:
        raise _refused("This project has no repository to import instructions from.")
    try:
        commit = workspace.pin_project_head(project.repository, PIN_REF.format(id=project.pk))
        stage = workspace.staging(project.repository)
        name, blob = _instruction_file(stage, commit)
        read = bounded_git.run(stage, "cat-file", "blob", blob, limit=MAX_INSTRUCTIONS * 4)
    except ToolError as error:
        raise _refused(str(error)) from None
    if read.cut or read.returncode != 0:
        raise _refused(f"{name} at {commit[:12]} is longer than the instructions may be.")
    text = read.out.decode("utf-8", errors="replace").replace("\r\n", "\n").strip()
    if len(text) > MAX_INSTRUCTIONS or "\x00" in text:
        raise _refused(
            f"{name} at {commit[:12]} is not text of at most {MAX_INSTRUCTIONS:,} characters."
        )
    changes = {"instructions": text, "instructions_from": f"{name} at {commit}"}
    return _save(project, changes, who=who, change=f"imported from {name} at {commit}")


def _instruction_file(stage: Any, commit: str) -> tuple[str, str]:
    """(name, blob) of the first instruction file at `commit`, a regular file (a link or a
    folder is refused: what it points to is not what the owner would read)."""
    listed = bounded_git.run(
        stage, "ls-tree", "--full-tree", commit, "--", *INSTRUCTION_FILES, limit=4096
    )
    found: dict[str, tuple[str, str, str]] = {}
    for line in listed.out.splitlines():
        match = _ENTRY.match(line)
        if match:
            mode, kind, blob, name = (part.decode(errors="replace") for part in match.groups())
            found[name] = (mode, kind, blob)
    for name in INSTRUCTION_FILES:
        if name not in found:
            continue
        mode, kind, blob = found[name]
        if kind != "blob" or mode not in REGULAR:
            raise ToolError(f"{name} at {commit[:12]} is not a regular file.")
        return name, blob
    raise ToolError(
        f"The default branch head ({commit[:12]}) has no {' or '.join(INSTRUCTION_FILES)}."
    )


def _criteria(has_repository: bool, given: Any) -> list[dict[str, Any]]:
    if given is None or given == []:
        return []
    clean = verification.validate(given)
    if not has_repository and any("command" in c["oracle"] for c in clean):
        raise verification.CriteriaError(
            "A criterion checked by a command runs in the project's repository, and this"
            " project has none."
        )
    return clean


def _save(project: Project, changes: dict[str, Any], *, who: audit.Actor, change: str) -> Project:
    if not changes:
        return project
    with transaction.atomic():
        Project.objects.filter(pk=project.pk).update(**changes)
        # What reaches every later run's system prompt, and what runs at each resume: logged.
        audit.record_by(
            AuditEvent.Kind.POLICY_CHANGED,
            who,
            by=who.by,
            project=project.pk,
            what="project settings",
            fields=sorted(key for key in changes if key != "instructions_from"),
            change=change,
        )
    project.refresh_from_db()
    return project


def _refused(message: str) -> MissionError:
    return MissionError(
        message,
        code="invalid_input",
        status=422,
        details={"fields": {"instructions": [message]}},
    )
