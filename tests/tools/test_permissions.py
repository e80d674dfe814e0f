"""Permission decisions: deny → ask → allow, protected paths first, defaults by risk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from missions.models import Project
from tools import permissions
from tools.base import Tool
from tools.files import EDIT_FILE, READ_FILE, WRITE_FILE
from tools.git import GIT_PUSH
from tools.models import PermissionRule
from tools.shell import SHELL

pytestmark = pytest.mark.django_db


@pytest.fixture
def project() -> Project:
    return Project.objects.create(name="p")


def decide(tool: Tool, arguments: dict[str, Any], project: Project) -> permissions.Verdict:
    return permissions.evaluate(tool, arguments, project_id=project.pk)


def test_defaults_follow_the_risk_class(project: Project) -> None:
    assert decide(READ_FILE, {"path": "a.py"}, project).decision == "allow"
    assert decide(SHELL, {"command": "make test"}, project).decision == "allow"
    verdict = decide(GIT_PUSH, {"branch": "main"}, project)
    assert verdict.decision == "ask"
    assert verdict.reason == "default for external tools"


def test_deny_beats_ask_beats_allow_whatever_the_order_of_creation(project: Project) -> None:
    PermissionRule.objects.create(tool="shell", pattern="*", decision="allow")
    PermissionRule.objects.create(tool="shell", pattern="*curl*", decision="ask")
    rm = PermissionRule.objects.create(tool="*", pattern="rm -rf *", decision="deny")
    PermissionRule.objects.create(tool="shell", pattern="rm -rf *", decision="allow")

    assert decide(SHELL, {"command": "ls"}, project).decision == "allow"
    assert decide(SHELL, {"command": "curl x | sh"}, project).decision == "ask"
    verdict = decide(SHELL, {"command": "rm -rf /workspace"}, project)
    assert verdict.decision == "deny"
    assert verdict.rule == rm.pk


def test_rules_of_another_project_do_not_apply(project: Project) -> None:
    other = Project.objects.create(name="other")
    PermissionRule.objects.create(project=other, tool="git_push", decision="allow")
    assert decide(GIT_PUSH, {"branch": "main"}, project).decision == "ask"
    assert permissions.evaluate(GIT_PUSH, {"branch": "main"}, project_id=other.pk).decision == (
        "allow"
    )


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".git/hooks/pre-commit",
        "src/.git/x",
        "/workspace/.git/HEAD",
        ".bashrc",
        "deep/dir/.zshrc",
        ".envrc",
        ".agentos/transcript.jsonl",
        ".claude/settings.json",
        ".husky/pre-push",
        "AGENTS.md",
        "./.git/../.git/config",
        ".gitattributes",
        "vendor/.gitattributes",
        ".gitmodules",
        ".github/workflows/ci.yml",
        ".vscode/tasks.json",
        ".idea/workspace.xml",
        ".cursor/rules/x.mdc",
        ".mcp.json",
        "GEMINI.md",
        ".githooks/pre-commit",
        "CLAUDE.md",
        "Agents.md",  # a case-insensitive file system (macOS) opens AGENTS.md for it
    ],
)
def test_protected_paths_are_denied_even_against_an_allow_rule(project: Project, path: str) -> None:
    PermissionRule.objects.create(tool="*", pattern="*", decision="allow")
    for tool in (WRITE_FILE, EDIT_FILE):
        verdict = decide(
            tool, {"path": path, "content": "", "old_text": "a", "new_text": "b"}, project
        )
        assert verdict.decision == "deny", path
        assert "protected" in verdict.reason


@pytest.mark.parametrize("path", ["README.md", "src/github/x.py", "docs/agents.txt", "gitattr"])
def test_ordinary_paths_are_not_protected(project: Project, path: str) -> None:
    assert permissions.protected(path) is None
    assert decide(WRITE_FILE, {"path": path, "content": ""}, project).decision == "allow"


def test_protection_is_judged_on_the_path_a_link_leads_to(project: Project, tmp_path: Path) -> None:
    (tmp_path / ".githooks").mkdir()
    (tmp_path / ".envrc").write_text("export A=1\n")
    (tmp_path / "hooks").symlink_to(".githooks")
    (tmp_path / "env").symlink_to(".envrc")
    (tmp_path / "gh").symlink_to("/workspace/.github")  # the sandbox's view of the top
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "up").symlink_to("..")

    def judged(tool: Tool, path: str) -> permissions.Verdict:
        arguments = {"path": path, "content": "", "old_text": "a", "new_text": "b"}
        return permissions.evaluate(tool, arguments, project_id=project.pk, workspace=tmp_path)

    hooks = judged(WRITE_FILE, "hooks/pre-commit")
    assert hooks.decision == "deny"
    assert ".githooks/ is protected" in hooks.reason
    assert "hooks/pre-commit leads to .githooks/pre-commit" in hooks.reason
    assert judged(EDIT_FILE, "env").decision == "deny"
    assert judged(WRITE_FILE, "gh/workflows/ci.yml").decision == "deny"
    assert judged(EDIT_FILE, "src/up/.envrc").decision == "deny"
    assert judged(WRITE_FILE, "src/ok.py").decision == "allow"
    assert not (tmp_path / ".github").exists()  # judging creates nothing
    # Without the worktree (no repository), the text path alone is judged.
    assert decide(WRITE_FILE, {"path": "hooks/pre-commit", "content": ""}, project).decision == (
        "allow"
    )


def test_reading_a_protected_path_is_not_a_write(project: Project) -> None:
    assert decide(READ_FILE, {"path": ".git/HEAD"}, project).decision == "allow"


def test_always_allow_matches_exactly_this_subject(project: Project) -> None:
    pattern = permissions.always_allow_pattern(SHELL, {"command": "pytest -k 'a*b' [x]"})
    PermissionRule.objects.create(project=project, tool="shell", pattern=pattern, decision="ask")
    assert decide(SHELL, {"command": "pytest -k 'a*b' [x]"}, project).decision == "ask"
    assert decide(SHELL, {"command": "pytest -k 'aXXb' [x]"}, project).decision == "allow"
    assert decide(SHELL, {"command": "pytest -k 'a*b' x"}, project).decision == "allow"


def test_a_rule_edit_applies_at_once_in_this_process(project: Project) -> None:
    assert decide(SHELL, {"command": "ls"}, project).decision == "allow"
    rule = PermissionRule.objects.create(tool="shell", pattern="ls", decision="deny")
    assert decide(SHELL, {"command": "ls"}, project).decision == "deny"
    rule.delete()
    assert decide(SHELL, {"command": "ls"}, project).decision == "allow"
