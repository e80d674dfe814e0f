"""Permission decisions, made by the harness and never by the model: deny → ask → allow.

Protected paths come first and no rule opens them: the repository's metadata (`.git`,
`.gitattributes`, `.gitmodules`), agent configuration, instructions and transcripts, editor and CI
configuration, hooks and shell rc files — whatever would let an agent change its own rules or
plant code that something else runs later (an editor opening the folder, CI, the next agent).
With the run's worktree at hand, a path is judged both as written and as resolved there (links
followed beneath the worktree): `hooks -> .githooks` does not open `.githooks/`. The writing tools
judge again when they write, and the shell undoes what a command changed there
(`tools.snapshots`). Names compare case-insensitively, as a macOS checkout opens them. Then the
owner's rules: any
matching deny wins, then any ask, then any allow. Without a matching rule, the tool's risk
class decides: reads and workspace writes are allowed (the sandbox holds them), network and
external actions ask the owner.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db.models.signals import post_delete, post_save

from tools import safefs, workspace
from tools.base import Risk, Tool, ToolError
from tools.models import Decision, PermissionRule

PROTECTED_DIRS = {
    ".git",
    ".agentos",
    ".claude",
    ".codex",
    ".gemini",
    ".cursor",
    ".githooks",
    ".husky",
    ".github",  # workflows run in CI with the repository's secrets
    ".vscode",  # tasks.json and settings run commands when the folder is opened
    ".idea",
}
PROTECTED_FILES = {
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".envrc",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".gitconfig",
    ".gitmodules",
    ".gitattributes",  # filters, textconv and `-diff` (a diff shown as "Binary files differ")
    ".pre-commit-config.yaml",
    ".mcp.json",
    ".cursorrules",
    "AGENTS.md",
    "CLAUDE.md",
    "GEMINI.md",
}
_DIRS = {name.casefold() for name in PROTECTED_DIRS}
_FILES = {name.casefold() for name in PROTECTED_FILES}
DEFAULTS = {
    Risk.READ: Decision.ALLOW,
    Risk.WORKSPACE_WRITE: Decision.ALLOW,
    Risk.NETWORK: Decision.ASK,
    Risk.EXTERNAL: Decision.ASK,
}
CACHE_SECONDS = 2.0  # other processes' rule edits apply within this; ours at once (signals)


@dataclass(frozen=True)
class Verdict:
    decision: str
    reason: str
    rule: int | None = None

    def as_dict(self) -> dict[str, Any]:
        # Once per tool call: by hand, `dataclasses.asdict` deep-copies generically (5 % of a turn).
        return {"decision": self.decision, "reason": self.reason, "rule": self.rule}


def protected_name(name: str) -> bool:
    """Whether a path with this component is protected (at this component or below it)."""
    folded = name.casefold()
    return folded in _DIRS or folded in _FILES


def protected(path: str) -> str | None:
    """Why `path` (workspace-relative) is protected, or None."""
    try:
        normal = workspace.relative(path)
    except ToolError:
        return None  # not a workspace path at all: the tool refuses it, precisely
    parts = [part for part in normal.split("/") if part not in ("", ".")]
    for part in parts:
        if part.casefold() in _DIRS:
            return f"{part}/ is protected (repository metadata, agent configuration or hooks)"
    if parts and parts[-1].casefold() in _FILES:
        return f"{parts[-1]} is protected (configuration an agent must not change)"
    return None


def protected_in(workspace: Path, path: str) -> str | None:
    """Why `path` is protected as written or as it resolves in `workspace` now, or None (also
    when it does not resolve: the tool then refuses it, precisely)."""
    why = protected(path)
    if why:
        return why
    try:
        real = safefs.resolved(workspace, path)
    except (ToolError, OSError):
        return None
    why = protected(real)
    return f"{why} ({path} leads to {real})" if why else None


def evaluate(
    tool: Tool,
    arguments: dict[str, Any],
    *,
    project_id: int | None,
    workspace: Path | None = None,
) -> Verdict:
    """The verdict on a call; with the run's `workspace`, paths are also judged as resolved."""
    if tool.risk != Risk.READ and isinstance(arguments.get("path"), str):
        path = arguments["path"]
        why = protected(path) if workspace is None else protected_in(workspace, path)
        if why:
            return Verdict(Decision.DENY, why)
    try:
        subject = tool.subject_of(arguments)
    except ToolError:
        subject = ""
    matched: dict[str, PermissionRule] = {}
    for rule in _rules():
        if rule.project_id not in (None, project_id) or rule.tool not in ("*", tool.name):
            continue
        if fnmatch.fnmatchcase(subject, rule.pattern):
            matched.setdefault(rule.decision, rule)
    for decision in (Decision.DENY, Decision.ASK, Decision.ALLOW):
        if decision in matched:
            rule = matched[decision]
            return Verdict(decision, f"rule {rule.pk}: {rule.tool} {rule.pattern}", rule.pk)
    return Verdict(DEFAULTS[Risk(tool.risk)], f"default for {tool.risk} tools")


def always_allow_pattern(tool: Tool, arguments: dict[str, Any]) -> str:
    """The glob matching exactly this call's subject ("always allow this in this project")."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in tool.subject_of(arguments))


_cache: tuple[float, list[PermissionRule]] = (0.0, [])
_lock = threading.Lock()


def _rules() -> list[PermissionRule]:
    global _cache
    loaded_at, rules = _cache
    if time.monotonic() - loaded_at < CACHE_SECONDS:
        return rules
    with _lock:
        rules = list(PermissionRule.objects.all())
        _cache = (time.monotonic(), rules)
    return rules


def _forget(**kwargs: Any) -> None:
    global _cache
    _cache = (0.0, [])


post_save.connect(_forget, sender=PermissionRule, dispatch_uid="permissions-forget-save")
post_delete.connect(_forget, sender=PermissionRule, dispatch_uid="permissions-forget-delete")
