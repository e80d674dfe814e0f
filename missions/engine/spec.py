"""What a run of the agent loop is (`Spec`, from the input recorded when it started) and the
hooks that may refuse to let it end (`STOP_HOOKS`, filled from the `ready()` of the apps that
define them: the missions app adds the definition of done's and the sub-agents' envelope's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentos.core.registries import Registry
from kernel.context import RunContext
from kernel.exceptions import StepFailed
from kernel.models import RunStatus

MAX_STOP_REFUSALS = 3  # then the run ends as its hook says (`blocked` by default)
STOP_HOOK_PREFIX = "You may not stop yet: "

# Stop hooks by name. A plain hook: (answer, run input) -> None to accept, or the reason to
# refuse, judged inside one journaled `verdict` step. A `ContextStopHook` acts through the run's
# context instead (its own journaled steps, child runs, durable waits).
StopHook = Callable[[str, dict[str, Any]], str | None]


@dataclass(frozen=True)
class StopCheck:
    """A context hook's answer: None to let the run end, else why not; `report` goes into the
    run's output either way (what was checked, what is missing)."""

    refusal: str | None
    report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContextStopHook:
    """`check(ctx, spec, answer, attempt)` (attempt: 1 for the run's first wish to end); after
    MAX_STOP_REFUSALS refusals the run ends `exhausted`."""

    check: Callable[[RunContext, Spec, str, int], StopCheck]
    exhausted: str = RunStatus.BLOCKED


STOP_HOOKS: Registry[StopHook | ContextStopHook] = Registry("stop hook")


@dataclass(frozen=True)
class Spec:
    """What a run of the loop is, as recorded in its input when it started."""

    goal: str
    provider: str
    model: str
    role: str = "executor"
    effort: str | None = None
    # Adaptive thinking (Anthropic) / reasoning summaries (OpenAI). Off for runs started before
    # it was recorded: turning it on in the middle of a tool loop is refused by Anthropic.
    thinking: bool = False
    tools: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    max_turns: int = 50
    context_window: int | None = None  # else the catalog's figure, else relief.DEFAULT_WINDOW
    stop_hook: str | None = None  # a name in STOP_HOOKS: may refuse to let the run end
    max_output_tokens: int = 8192
    instructions: str = ""
    memory_index: str = ""
    script: dict[str, Any] | None = None
    repository: str = ""  # a local git repository: the run works in its own worktree of it
    base: str = "HEAD"  # what the worktree starts from
    # A checkpoint before each workspace write (`tools.checkpoints`). Off for runs started before
    # it was recorded: a new step in the middle of their journal would not match on resume.
    checkpoints: bool = False
    # Content not from the owner or the system reaches the model in data blocks (`framing`).
    # Off for runs started before it was recorded: their prompts must stay byte-identical.
    data_framing: bool = False
    # The memory index reaches the model as data in its first message (`framing.memory`), not in
    # the system prompt. Off for runs started before it was recorded: their prompts must stay
    # byte-identical.
    memory_as_data: bool = False
    # The skills offered at launch (`memory.skills.offered`: name, description, source, commit,
    # folder), frozen; their index reaches the model as data in its first message
    # (`framing.skills`), their bodies through `load_skill`.
    skills: list[dict[str, Any]] = field(default_factory=list)
    # A sub-agent's contract (`missions.delegation`): what its parent asked, the schema its
    # result envelope's payload must match. None for a root run.
    contract: dict[str, Any] | None = None
    # The definition of done as criteria (`missions.verification`): [{"id", "description",
    # "oracle", "passes"}]; only `passes` ever changes.
    criteria: list[dict[str, Any]] = field(default_factory=list)
    # Stall detection (`stalls`): a re-plan, then an owner question. Off for runs started
    # before it was recorded: its steps in the middle of their journal would not match.
    stalls: bool = False
    # Where its tools' commands run (`tools.levels`), from its mission's risk class: 0 reads
    # only, 1 a bubblewrap sandbox, 2 a virtual machine per task. 1 for runs started before it
    # was recorded.
    sandbox_level: int = 1
    # The MCP tools it may call, frozen at launch (`tools.mcp.toolset.freeze`): empty for runs
    # started before they were recorded.
    mcp_tools: list[dict[str, Any]] = field(default_factory=list)
    # What its sandboxes may reach besides the owner's egress rules (`missions.network` reads
    # them from the run's input): API bridges by name, and extra hosts.
    bridges: list[str] = field(default_factory=list)
    allowed_hosts: list[str] = field(default_factory=list)
    # Plan, then execute: the run's plan is fixed before it reads untrusted content.
    sensitive: bool = False
    # The resume routine (`resume`): a smoke test, the progress file and the ledger at the
    # run's start and at each resume; the watch on its mission's units. Off for runs started
    # before it was recorded: its steps in the middle of their journal would not match.
    resume: bool = False
    # Old tool results are not cleared on our side when the provider caches prompts: each
    # clearing rewrites the cached thread (`window.Window._keeps_cache`); compaction relieves
    # the window. Off for runs started before it was recorded: a replay must clear where their
    # first execution did.
    cache_aware_clearing: bool = False

    @classmethod
    def from_input(cls, data: Any) -> Spec:
        if not isinstance(data, dict) or not str(data.get("goal", "")).strip():
            raise StepFailed("The run's input needs a goal.")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise StepFailed(f"Unknown run input field(s): {', '.join(unknown)}.")
        return cls(**data)
