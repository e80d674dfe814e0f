"""Domain profiles: a mission started with one records it and takes its routes, tools, level,
criteria and caps where it names none; what the mission names wins, and its level is never below
its risk class's. Bad profiles and unknown names are refused precisely, with nothing written."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentos.core import audit
from agentos.core.models import AuditEvent
from kernel.models import Run
from missions import profiles, routing
from missions.errors import MissionError
from missions.launch import create_mission
from missions.models import Mission, Profile, Project

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_profiles")]

SCRIPT = {"turns": [{"text": "Done."}]}
OWNER = audit.Actor(by="owner", username="owner")


@pytest.fixture
def repository(tmp_path: Path) -> Project:
    """A project with a git repository of one commit: its missions get the coding tools."""
    path = tmp_path / "repo"
    path.mkdir()
    (path / "README.md").write_text("notes\n")
    for command in (
        ["init", "-q", "--initial-branch=main"],
        ["add", "README.md"],
        ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "first"],
    ):
        subprocess.run(["git", "-C", str(path), *command], check=True)
    return Project.objects.create(name="notes", repository=str(path))


def test_it_applies_the_profile_where_the_mission_names_nothing(
    repository: Project, seeded_catalog: None
) -> None:
    research = Profile.objects.get(name="research")

    mission, run = create_mission(
        project=repository,
        goal="Which release fixed the leak?",
        trigger="api",
        script=SCRIPT,
        risk_class="research",
        profile="research",
    )

    assert mission.profile == research
    # Level: the higher of the risk class's (0) and the profile's (1).
    assert (mission.risk_class, run.input["sandbox_level"]) == ("code", 1)
    # Routes: an effort alone is the role's default model, at that effort.
    default = routing.default_route("executor")
    assert default is not None
    assert mission.routes["executor"] == {
        "provider": default.provider,
        "model": default.model,
        "effort": "high",
    }
    assert set(mission.routes) == {"planner", "executor"}
    # Criteria: the templates, each checked by an evaluator, holding the run.
    assert [c["description"] for c in mission.criteria] == research.criteria
    assert {c["oracle"]["evaluator"] for c in mission.criteria} == {True}
    assert run.input["criteria"] == mission.criteria
    assert run.input["stop_hook"] == "definition_of_done"
    # Caps: the profile's, not the owner's defaults.
    assert (mission.max_tokens, mission.max_usd_micros, mission.max_seconds) == (
        research.max_tokens,
        research.max_usd_micros,
        research.max_seconds,
    )
    assert run.max_seconds == research.max_seconds
    # Tools: only the profile's, of those the mission would get.
    tools = run.input["tools"]
    assert "shell" in tools
    assert "read_file" in tools
    assert not {"git_push", "git_commit", "merge_work", "git_branch"} & set(tools)
    assert set(tools) <= {*research.tools, "load_skill"}


def test_what_the_mission_names_wins_over_its_profile(
    repository: Project, seeded_catalog: None
) -> None:
    mission, run = create_mission(
        project=repository,
        goal="Fix the date parser.",
        trigger="api",
        script=SCRIPT,
        routes={"executor": {"provider": "scripted", "model": "scripted"}},
        caps={"max_tokens": 40_000, "max_seconds": None},
        criteria=[
            {"id": "doc", "description": "The fix is explained.", "oracle": {"evaluator": True}}
        ],
        profile="programming",
    )

    programming = Profile.objects.get(name="programming")
    assert mission.routes["executor"] == {
        "provider": "scripted",
        "model": "scripted",
        "effort": None,
    }
    assert [c["id"] for c in mission.criteria] == ["doc"]
    assert (mission.max_tokens, mission.max_seconds) == (40_000, None)
    assert mission.max_usd_micros == programming.max_usd_micros  # the one it did not name
    # Every tool its level allows: the programming profile lists none.
    assert {"git_commit", "git_push", "merge_work", "shell"} <= set(run.input["tools"])


def test_the_projects_default_criteria_come_before_the_profiles(
    repository: Project, seeded_catalog: None
) -> None:
    done = {"id": "tests", "description": "The tests pass.", "oracle": {"command": "true"}}
    Project.objects.filter(pk=repository.pk).update(default_criteria=[done])
    repository.refresh_from_db()

    mission, run = create_mission(
        project=repository,
        goal="Fix the date parser.",
        trigger="api",
        script=SCRIPT,
        profile="programming",
    )

    assert [c["id"] for c in mission.criteria] == ["tests"]
    assert [c["id"] for c in run.input["criteria"]] == ["tests"]


def test_a_profile_never_lowers_the_risk_class_level(project: Project) -> None:
    Profile.objects.filter(name="automation").update(sandbox_level=0, criteria=[])

    mission, run = create_mission(
        project=project, goal="Rename the files.", trigger="api", script=SCRIPT,
        profile="automation",
    )  # fmt: skip

    assert (mission.risk_class, run.input["sandbox_level"]) == ("code", 1)


@pytest.fixture
def project() -> Project:
    return Project.objects.create(name="plain")


def test_an_unknown_profile_is_refused_naming_the_known_ones(project: Project) -> None:
    with pytest.raises(MissionError) as refused:
        create_mission(project=project, goal="x", trigger="api", script=SCRIPT, profile="ops")

    assert refused.value.status == 422
    assert refused.value.details["profiles"] == [
        "analysis",
        "automation",
        "programming",
        "research",
    ]
    assert "No profile 'ops'; profiles: analysis, automation, programming, research." in str(
        refused.value
    )
    assert not Mission.objects.exists()
    assert not Run.objects.exists()


def test_an_offline_mission_takes_no_profile(project: Project) -> None:
    with pytest.raises(MissionError, match="leave the profile out"):
        create_mission(project=project, trigger="api", offline="survey", profile="research")
    assert not Mission.objects.exists()


def test_narrow_keeps_the_profiles_tools_and_skills() -> None:
    profile = Profile(name="p", tools=["read_file"], skills=["b"])
    spec: dict[str, Any] = {
        "tools": ["read_file", "shell", "load_skill"],
        "skills": [{"name": "a"}, {"name": "b"}],
    }
    profiles.narrow(spec, profile)
    assert spec == {"tools": ["read_file", "load_skill"], "skills": [{"name": "b"}]}

    profile.skills = ["z"]
    profiles.narrow(spec, profile)
    assert spec == {"tools": ["read_file"]}


@pytest.mark.parametrize(
    ("values", "field", "said"),
    [
        ({"tools": ["read_file", "teleport"]}, "tools", "No tool named teleport; tools:"),
        ({"mcp_servers": ["github"]}, "mcp_servers", "No approved MCP server named github."),
        ({"skills": ["Bad Name"]}, "skills", "Not a name: Bad Name."),
        ({"sandbox_level": 3}, "sandbox_level", "One of 0, 1, 2."),
        ({"criteria": ["ok", ""]}, "criteria", "Each criterion is a non-empty line."),
        ({"criteria": ["$ "]}, "criteria", "Criterion 1 (c1)"),
        ({"max_tokens": 0}, "max_tokens", "An integer from 1 to"),
        ({"routes": {"pilot": {"effort": "low"}}}, "routes", "Unknown role 'pilot'"),
        ({"routes": {"executor": {}}}, "routes", "The route of executor is"),
        ({"routes": {"executor": {"provider": "x", "model": "m"}}}, "routes", "Unknown provider"),
        ({"colour": "red"}, "colour", "Not a field of a profile."),
    ],
)
def test_a_bad_profile_is_refused_field_by_field(
    values: dict[str, Any], field: str, said: str
) -> None:
    before = Profile.objects.get(name="research").updated_at

    with pytest.raises(MissionError) as refused:
        profiles.save("research", values, actor=OWNER)

    assert refused.value.status == 422
    problems = refused.value.details["fields"]
    assert list(problems) == [field]
    assert said in " ".join(problems[field])
    assert Profile.objects.get(name="research").updated_at == before
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).exists()


def test_saving_a_profile_is_in_the_security_log() -> None:
    profiles.save(
        "ops",
        {"routes": {"executor": {"effort": "low"}}, "criteria": ["Each change is logged."]},
        actor=OWNER,
        create=True,
    )

    ops = Profile.objects.get(name="ops")
    assert (ops.routes, ops.criteria, ops.sandbox_level) == (
        {"executor": {"effort": "low"}},
        ["Each change is logged."],
        1,
    )
    event = AuditEvent.objects.get(kind=AuditEvent.Kind.POLICY_CHANGED)
    assert event.detail["profile"] == "ops"
    with pytest.raises(MissionError, match="exists already"):
        profiles.save("ops", {}, actor=OWNER, create=True)
