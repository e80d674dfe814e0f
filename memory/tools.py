"""Memory tools for agents: look at an index, open a note, search, write and invalidate in the
run's project, and propose changes to shared memory (global, skills, agent manuals), which wait for
the owner's approval on a diff (the harness asks: `Risk.EXTERNAL`).

Scopes are named relative to the run: `project` is its own project's; an agent never reaches
another project's memory. What an agent writes is unverified — only the owner's act on a note
verifies it, whatever the note cites — and cites the journal up to the call as its source.
Registered with the tool registry by the app (`MemoryConfig.ready`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kernel.models import Effect, Event
from memory import search, store
from memory.models import Note
from memory.notes import INDEX_FILE, TYPES, NoteError
from memory.store import Draft
from tools.base import Risk, Tool, ToolEnv, ToolError

SHARED_SCOPE = {"type": "string", "pattern": r"^(global|skills|agent/[a-z0-9_-]{1,64})$"}
ANY_SCOPE = {"type": "string", "pattern": r"^(project|global|skills|agent/[a-z0-9_-]{1,64})$"}
PATH = {"type": "string", "pattern": r"^notes/\d{4}-\d{2}/[a-z0-9-]{1,120}\.md$"}
NOTE = {
    "title": {"type": "string", "minLength": 1, "maxLength": 200},
    "body": {"type": "string", "maxLength": 20_000},
    "type": {"type": "string", "enum": list(TYPES)},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
}


def scope_of(env: ToolEnv, name: str) -> str:
    if name != "project":
        return name
    if env.project_id is None:
        raise ToolError("This run has no project: its memory is global only.")
    return f"project/{env.project_id}"


def _answered[T](
    run: Callable[[ToolEnv, dict[str, Any]], T],
) -> Callable[[ToolEnv, dict[str, Any]], T]:
    """A memory refusal (`NoteError`) goes back to the model as the call's error."""

    @functools.wraps(run)
    def answered(env: ToolEnv, arguments: dict[str, Any]) -> T:
        try:
            return run(env, arguments)
        except NoteError as error:
            raise ToolError(str(error)) from None

    return answered


def _author(env: ToolEnv) -> str:
    return f"run:{env.run_id}"


def _cited(env: ToolEnv) -> tuple[int, ...]:
    """The journal up to this call: the run's newest event."""
    last = Event.objects.filter(run_id=env.run_id).order_by("-id").values_list("id", flat=True)
    return tuple(last[:1])


def _draft(
    env: ToolEnv,
    arguments: dict[str, Any],
    valid_from: datetime | None = None,
    cited: tuple[int, ...] | None = None,
) -> Draft:
    return Draft(
        title=arguments["title"],
        body=arguments.get("body", ""),
        type=arguments.get("type", "fact"),
        confidence=arguments.get("confidence", 0.5),
        source_events=_cited(env) if cited is None else cited,
        valid_from=valid_from,
        # Never verified by a run: only the owner's act on the note is (`memory.notes`).
    )


@_answered
def _searching(env: ToolEnv, arguments: dict[str, Any]) -> str:
    names = arguments.get("scopes") or ["project", "global"]
    scopes = []
    for name in names:
        try:
            scopes.append(scope_of(env, name))
        except ToolError:
            continue  # no project: search the rest
    as_of = _moment(arguments.get("as_of"))
    hits = search.search(arguments["query"], scopes=scopes, as_of=as_of, k=arguments.get("k", 8))
    if not hits:
        return "No note matches."
    lines = []
    for number, hit in enumerate(hits, 1):
        state = "verified by the owner" if hit.verified else "unverified"
        until = f" until {hit.invalid_at:%Y-%m-%d}" if hit.invalid_at else ""
        events = ", ".join(str(e) for e in hit.source_events) or "none"
        lines.append(
            f"{number}. [{hit.scope}] {hit.path} — {hit.title} (by {hit.author}, {state};"
            f" valid from {hit.valid_from:%Y-%m-%d}{until}; source events {events})\n"
            f"   {hit.snippet}"
        )
    return "\n".join(lines)


def _index(env: ToolEnv, arguments: dict[str, Any]) -> str:
    scope = scope_of(env, arguments.get("scope", "project"))
    try:
        return store.read_file(scope, INDEX_FILE)
    except NoteError:
        return f"{scope} has no notes yet."


@_answered
def _open(env: ToolEnv, arguments: dict[str, Any]) -> str:
    scope = scope_of(env, arguments.get("scope", "project"))
    return store.read_file(scope, arguments["path"])


@_answered
def _write(env: ToolEnv, arguments: dict[str, Any]) -> str:
    scope = scope_of(env, "project")
    replaces = arguments.get("replaces", "")
    if replaces:
        _refuse_if_verified(scope, replaces)
        (path,) = store.replace(scope, replaces, _draft(env, arguments), author=_author(env))
    else:
        (path,) = store.write(
            scope, [_draft(env, arguments)], author=_author(env), message=arguments["title"]
        )
    return f"Written to {scope}: {path} (unverified until the owner verifies it)."


def _refuse_if_verified(scope: str, path: str) -> None:
    """What the owner verified stays until the owner ends it: an agent (whose reading may come
    from hostile content) cannot remove the owner's knowledge, only add a note beside it."""
    if Note.objects.filter(
        scope__name=scope, path=path, verified=True, invalid_at__isnull=True
    ).exists():
        raise NoteError(
            f"{path} is verified by the owner: an agent cannot end it. Write a new note beside it"
            " and tell the owner (notify_owner), who decides."
        )


@_answered
def _invalidate(env: ToolEnv, arguments: dict[str, Any]) -> str:
    scope = scope_of(env, "project")
    _refuse_if_verified(scope, arguments["path"])
    ended = store.invalidate(
        scope,
        arguments["path"],
        author=_author(env),
        reason=arguments["reason"],
        source_events=_cited(env),
        tolerate_invalid=True,
    )
    assert ended.invalid_at is not None  # noqa: S101  # invalidate's contract
    return f"{arguments['path']} no longer holds since {ended.invalid_at:%Y-%m-%d %H:%M} UTC."


@_answered
def _proposal_preview(env: ToolEnv, arguments: dict[str, Any]) -> dict[str, Any]:
    draft = _draft(env, arguments)
    proposal = store.propose(
        arguments["scope"], draft, author=_author(env), replaces=arguments.get("replaces", "")
    )
    return {
        "diff": proposal.diff,
        "files": [{"path": proposal.path, "status": "A"}],
        "files_total": 1,
        "branch": proposal.branch,
        "valid_from": proposal.valid_from.isoformat(),
        # What it cited when shown: the note lands citing the same, as the diff showed it.
        "source_events": list(draft.source_events),
    }


@_answered
def _propose(env: ToolEnv, arguments: dict[str, Any]) -> str:
    preview = (env.approval or {}).get("preview") or {}
    if not preview.get("valid_from"):
        raise ToolError("A proposal lands only after the owner approved it.")
    # The note the owner approved, byte for byte: its time and citations are the preview's
    # (a citation made now would name the approval's own events). A preview made before it
    # was recorded cites as it did then: the journal up to now.
    shown = preview.get("source_events")
    cited = None if shown is None else tuple(int(event) for event in shown)
    draft = _draft(
        env, arguments, valid_from=datetime.fromisoformat(preview["valid_from"]), cited=cited
    )
    path = store.land(
        arguments["scope"], draft, author=_author(env), replaces=arguments.get("replaces", "")
    )
    return f"Approved and written to {arguments['scope']}: {path}."


def _moment(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(f"as_of: {value!r} is not an ISO 8601 date.") from None
    if moment.tzinfo is None:
        raise ToolError("as_of needs a time zone (e.g. 2026-03-01T00:00:00Z).")
    return moment


MEMORY_SEARCH = Tool(
    name="memory_search",
    description=(
        "Search durable memory (the project's and global by default) by words and meaning;"
        " returns snippets with their path, validity and source events. as_of answers as of a"
        " past moment."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 1000},
            "scopes": {"type": "array", "items": ANY_SCOPE, "maxItems": 4},
            "as_of": {"type": "string", "maxLength": 40},
            "k": {"type": "integer", "minimum": 1, "maximum": 20},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_searching,
    parallel_safe=True,
)
MEMORY_INDEX = Tool(
    name="memory_index",
    description="Show a memory scope's index (MEMORY.md): one line per note, newest first.",
    input_schema={
        "type": "object",
        "properties": {"scope": ANY_SCOPE},
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_index,
    parallel_safe=True,
)
MEMORY_OPEN = Tool(
    name="memory_open",
    description="Open a memory note by its path (from the index or a search).",
    input_schema={
        "type": "object",
        "properties": {"scope": ANY_SCOPE, "path": PATH},
        "required": ["path"],
        "additionalProperties": False,
    },
    effect=Effect.READ,
    risk=Risk.READ,
    run=_open,
    parallel_safe=True,
)
MEMORY_WRITE = Tool(
    name="memory_write",
    description=(
        "Record a note in the project's memory: a fact, lesson, decision, preference, procedure"
        " or event worth knowing in later missions. To correct a note, give its path as"
        " `replaces`: it is invalidated and the new one added, never rewritten."
    ),
    input_schema={
        "type": "object",
        "properties": {**NOTE, "replaces": PATH},
        "required": ["title", "body"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,  # a note's name derives from its content: no double
    risk=Risk.WORKSPACE_WRITE,
    run=_write,
)
MEMORY_INVALIDATE = Tool(
    name="memory_invalidate",
    description="Mark a note of the project's memory as no longer true (it is kept, dated).",
    input_schema={
        "type": "object",
        "properties": {
            "path": PATH,
            "reason": {"type": "string", "minLength": 1, "maxLength": 500},
        },
        "required": ["path", "reason"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    run=_invalidate,
)
MEMORY_PROPOSE = Tool(
    name="memory_propose",
    description=(
        "Propose a note for shared memory (global, skills, or agent/<role> manuals): the owner"
        " approves it on a diff before it is written."
    ),
    input_schema={
        "type": "object",
        "properties": {"scope": SHARED_SCOPE, **NOTE, "replaces": PATH},
        "required": ["scope", "title", "body"],
        "additionalProperties": False,
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.EXTERNAL,  # asks the owner, with the diff `preview` shows
    run=_propose,
    preview=_proposal_preview,
    subject=lambda arguments: str(arguments.get("scope", "")),
)
MEMORY_TOOLS = (
    MEMORY_SEARCH,
    MEMORY_INDEX,
    MEMORY_OPEN,
    MEMORY_WRITE,
    MEMORY_INVALIDATE,
    MEMORY_PROPOSE,
)
MEMORY_TOOL_NAMES = [tool.name for tool in MEMORY_TOOLS]
