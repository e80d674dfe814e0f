"""The Tool type: what a tool is, for the harness that decides whether and how to run it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jsonschema

from kernel.context import StepCall
from kernel.models import Effect, Trust

if TYPE_CHECKING:
    from cluster.environments import Environment
    from kernel.context import RunContext


class Risk(StrEnum):
    READ = "read"
    WORKSPACE_WRITE = "workspace_write"
    NETWORK = "network"
    EXTERNAL = "external"  # external or irreversible: needs an owner approval


class ToolInputError(ValueError):
    """The model's arguments do not match the tool's schema: answered to the model, not run."""


class ToolError(Exception):
    """A tool refused or failed in a way the model should read (a path out of the workspace, a
    stale edit...): the message goes back as an error result, and is journaled."""


class Output(NamedTuple):
    """A tool's text with the exit code of the command it ran, which the harness journals in the
    result's own `exit_code` field: the text is the command's to write (it can print anything,
    a line like the sandbox's outcome included), the field is not. Whoever judges a command by
    its outcome (the ledger's proofs) reads the field only."""

    text: str
    exit_code: int | None  # None when the command was killed (timeout, cancellation)


def text_of(answer: str | Output) -> str:
    """A tool's answer as the model reads it, whether or not it carries an exit code."""
    return answer.text if isinstance(answer, Output) else answer


@dataclass(frozen=True)
class ToolEnv:
    """What a tool runs with: its step (idempotency key, fence, stop flag), its run's id, its
    project and the run's worktree (None for a run without a repository)."""

    call: StepCall
    run_id: int
    project_id: int | None
    workspace: Path | None
    approval: dict[str, Any] | None = None  # the owner's approval this call runs under
    sandbox_level: int = 1  # what this call's commands run in (`tools.levels`)
    # Puts the worktree back to the checkpoint taken before this write (None: not a checkpointed
    # write): an attempt lost with its node may have written before it died.
    restore: Callable[[], None] | None = None
    environment: Environment | None = None  # the project's frozen toolchain, at /env

    def need_workspace(self) -> Path:
        if self.workspace is None:
            raise ToolError("This run has no workspace (its mission's project has no repository).")
        return self.workspace


@dataclass(frozen=True)
class Worksite:
    """Where a run's tools act: its project (for permission rules) and its worktree."""

    run_id: int
    project_id: int | None
    workspace: Path | None
    sandbox_level: int = 1  # the run's, from its mission's risk class (`tools.levels`)
    environment: Environment | None = None  # its project's (`cluster.environments`)

    def env(
        self,
        call: StepCall,
        approval: dict[str, Any] | None = None,
        *,
        level: int | None = None,
        restore: Callable[[], None] | None = None,
    ) -> ToolEnv:
        """The environment of one call; `level` (a tool's minimum may raise the run's)."""
        return ToolEnv(
            call,
            self.run_id,
            self.project_id,
            self.workspace,
            approval,
            self.sandbox_level if level is None else level,
            restore,
            self.environment,
        )


def arguments_hash(tool: str, arguments: Any) -> str:
    """The hash an approval is bound to: the tool and its exact arguments, canonically."""
    body = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class Tool:
    """A typed tool.

    - `run(env, arguments) -> str | Output` does the work; its text goes back to the model (an
      `Output` also carries the exit code of the command it ran, journaled apart).
    - `probe(env, arguments)`, for non-idempotent tools: after a crash, "did this call already
      take effect?" — the earlier output, or None.
    - `subject(arguments)`: the text permission patterns match (a path, a command); default:
      the arguments as canonical JSON.
    - `preview(env, arguments)`: what an approval shows besides the call (`{"diff": ...}` and
      facts the call is then bound to, such as the commit a push will send).
    - `interact(ctx, worksite, arguments)`: for tools that talk to the owner — they run as journaled
      steps and durable waits of their own, instead of `run`.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    effect: Effect
    risk: Risk
    run: Callable[[ToolEnv, dict[str, Any]], str | Output]
    min_sandbox_level: int = 0
    parallel_safe: bool = False
    probe: Callable[[ToolEnv, dict[str, Any]], str | None] | None = None
    subject: Callable[[dict[str, Any]], str] | None = None
    preview: Callable[[ToolEnv, dict[str, Any]], dict[str, Any]] | None = None
    interact: Callable[[RunContext, Worksite, dict[str, Any]], str] | None = None
    deferred: bool = False  # only name and description in context; schema loaded on demand
    # How far the model may trust its output at most (`missions.engine.framing`): None, by its
    # step (a tool's, or the owner's for an answer of theirs); the Web's for content from
    # outside (a fetched page, an untrusted MCP server, an A2A agent).
    trust: Trust | None = None
    # The rule-of-two flags a call sets when it runs (`kernel.exposure`): a call that would set
    # the third flag of its run's tree waits for the owner, whatever the permission rules say.
    exposes: frozenset[str] = frozenset()
    _validator: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        # Check the schema and build its validator once, not on every call.
        cls = jsonschema.validators.validator_for(self.input_schema)
        cls.check_schema(self.input_schema)
        object.__setattr__(self, "_validator", cls(self.input_schema))

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The arguments if they match the input schema; else a precise `ToolInputError`."""
        if not isinstance(arguments, dict):
            raise ToolInputError(f"{self.name}: arguments must be a JSON object.")
        # The common case, valid arguments, without building an error tree.
        if self._validator.is_valid(arguments):
            return arguments
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path) or "(root)"
            raise ToolInputError(f"{self.name}: {where}: {error.message}")
        return arguments

    def subject_of(self, arguments: dict[str, Any]) -> str:
        if self.subject is not None:
            return self.subject(arguments)
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False)
