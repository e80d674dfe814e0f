"""Permission decisions: deny → ask → allow, protected paths first, defaults by risk."""

from __future__ import annotations

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
