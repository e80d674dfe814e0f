"""Projects and missions over /api/v1: one creation path for every trigger."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.models import Node
from kernel import runs
from kernel.models import Event, Run
from missions import overview
from missions.blueprints import RoleName
from missions.launch import create_mission
from missions.models import Mission, Project, Role
from tests.agentos.test_api import error_of
from tests.api.conftest import Api
from tests.api.factories import add_steps, end_run, make_mission, make_project

MISSION: dict[str, Any] = {
    "goal": "Write the release notes.",
    "definition_of_done": "NOTES.md lists 1.3.",
}


@pytest.fixture
def with_key(monkeypatch: pytest.MonkeyPatch, seeded_catalog: None) -> None:
    """A provider key: runs are created (never executed here) on the default routes."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


# --- projects -----------------------------------------------------------------------------------


def test_it_creates_lists_and_shows_projects(api: Api, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)

    created = api.post(
        "/projects",
        {"name": " notes ", "description": "Release notes", "repository": str(tmp_path)},
    )

    assert created.status_code == 201
    body = created.json()
    assert body == {
        "id": body["id"],
        "name": "notes",
        "description": "Release notes",
        "repository": str(tmp_path),
        "clone_url": "",
        "mcp_servers": [],
        "instructions": "",
        "instructions_from": "",
        "default_criteria": [],
        "smoke_command": "",
        "created_at": body["created_at"],
    }
    assert [item["name"] for item in api.get("/projects").json()] == ["notes"]
    assert api.get(f"/projects/{body['id']}").json() == body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "p", "repository": "relative/path"}, "repository"),
        ({"name": "p", "repository": "/nonexistent/repository"}, "repository"),
        ({"name": "  "}, "name"),
        ({"name": "taken"}, "name"),
    ],
)
def test_it_refuses_an_invalid_project_naming_the_field(
    api: Api, body: dict[str, str], field: str
) -> None:
    make_project("taken")

    response = api.post("/projects", body)

    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid_input"
    assert set(error["details"]["fields"]) == {field}  # type: ignore[index]
    assert Project.objects.count() == 1


@pytest.mark.parametrize(
    "body",
    [{}, {"name": "p", "colour": "red"}, {"name": "p\x00"}, {"name": "x" * 121}, {"name": 3}],
)
def test_it_refuses_a_project_off_the_schema(api: Api, body: dict[str, Any]) -> None:
    response = api.post("/projects", body)

    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_input"
    assert not Project.objects.exists()


def test_it_answers_404_for_an_unknown_project(api: Api, db: None) -> None:
    response = api.get("/projects/999999")

    assert response.status_code == 404
    assert error_of(response) == {
        "code": "not_found",
        "message": "No project 999999.",
        "details": None,
    }


def test_it_answers_malformed_json_with_400(api: Api) -> None:
    response = api.post("/projects", '{"name": ')

    assert response.status_code == 400
    assert error_of(response)["code"] == "malformed_json"


# --- missions -----------------------------------------------------------------------------------


def test_it_creates_a_mission_and_starts_its_root_run(api: Api, with_key: None) -> None:
    project = make_project()

    response = api.post(
        "/missions",
        {
            "project_id": project.pk,
            **MISSION,
            "caps": {"max_usd_micros": 2_000_000, "max_turns": 30, "max_seconds": 7200},
            "routes": {"executor": {"provider": "anthropic", "model": "claude-opus-5-5"}},
        },
    )

    assert response.status_code == 201
    body = response.json()
    mission = Mission.objects.get()
    run = Run.objects.get()
    assert body == {
        "id": mission.pk,
        "project_id": project.pk,
        "goal": "Write the release notes.",
        "definition_of_done": "NOTES.md lists 1.3.",
        "criteria": [],
        "risk_class": "code",
        "sandbox_level": 1,
        "caps": {
            "max_tokens": 2_000_000,  # the owner's default, as it set none
            "max_usd_micros": 2_000_000,
            "max_turns": 30,
            "max_tool_calls": None,
            "max_seconds": 7200,
            "max_concurrent_runs": 12,
        },
        "routes": {
            "executor": {"provider": "anthropic", "model": "claude-opus-5-5", "effort": None}
        },
        "mcp_servers": [],
        "bridges": [],
        "allowed_hosts": [],
        "sensitive": False,
        "profile": None,
        "created_at": body["created_at"],
        "run_id": run.pk,
        "offline": None,
    }
    assert (run.account_id, run.status, run.contract["trigger"]) == (mission.pk, "queued", "api")
    assert run.model == "claude-opus-5-5"
    assert run.max_seconds == 7200  # the mission's wall time is its root run's


def test_a_mission_from_the_api_is_the_same_as_any_other_but_its_trigger(
    api: Api, with_key: None
) -> None:
    project = make_project()
    caps = {"max_usd_micros": 5_000_000}
    routes = {"executor": {"provider": "anthropic", "model": "claude-opus-5-5", "effort": "high"}}

    from_api = api.post(
        "/missions", {"project_id": project.pk, **MISSION, "caps": caps, "routes": routes}
    )
    _mission, direct = create_mission(
        project=project, **MISSION, caps=caps, routes=routes, trigger="owner"
    )

    via_api = Run.objects.get(pk=from_api.json()["run_id"])
    ignored = {"_state", "id", "account_id", "root_id", "created_at", "runnable_at", "contract"}
    assert {k: v for k, v in vars(via_api).items() if k not in ignored} == {
        k: v for k, v in vars(direct).items() if k not in ignored
    }
    assert via_api.contract == {**direct.contract, "trigger": "api"}
    assert via_api.root_id == via_api.pk
    kinds = [
        list(Event.objects.filter(run_id=run.pk).values_list("kind", flat=True))
        for run in (via_api, direct)
    ]
    assert kinds[0] == kinds[1] == ["run.created"]


def test_it_refuses_a_mission_without_a_provider_key_and_creates_nothing(
    api: Api, seeded_catalog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    response = api.post("/missions", {"project_id": make_project().pk, **MISSION})

    assert response.status_code == 400
    assert error_of(response)["code"] == "no_provider"
    assert not Mission.objects.exists()
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"project_id": 999999, "goal": "x"}, 404, "not_found"),
        ({"project_id": None, "goal": "x"}, 422, "invalid_input"),
        ({"goal": "   "}, 400, "invalid_input"),  # blank after stripping: the service says so
        ({"goal": "x", "caps": {"max_dollars": 1}}, 422, "invalid_input"),
        ({"goal": "x", "caps": {"max_turns": -1}}, 422, "invalid_input"),
        ({"goal": "x", "caps": {"max_tokens": 2**63}}, 422, "invalid_input"),
        ({"goal": "x", "caps": {"max_turns": "10"}}, 422, "invalid_input"),
        (
            {"goal": "x", "routes": {"boss": {"provider": "openai", "model": "m"}}},
            422,
            "invalid_input",
        ),
        (
            {"goal": "x", "routes": {"executor": {"provider": "acme", "model": "m"}}},
            422,
            "invalid_input",
        ),
        ({"goal": "x", "routes": {"executor": {"provider": "openai"}}}, 422, "invalid_input"),
        ({"goal": "x\x00"}, 422, "invalid_input"),
    ],
)
def test_it_refuses_a_bad_mission_and_creates_nothing(
    api: Api, with_key: None, body: dict[str, Any], status: int, code: str
) -> None:
    body = {"project_id": make_project().pk, **body}

    response = api.post("/missions", body)

    assert (response.status_code, error_of(response)["code"]) == (status, code)
    assert not Mission.objects.exists()


def test_the_schema_names_every_role() -> None:
    assert set(RoleName.__args__) == set(Role.values)  # type: ignore[attr-defined]


def test_it_pages_missions_newest_first_by_cursor(api: Api) -> None:
    made = [make_mission(f"Goal {n}")[0] for n in range(5)]
    other = make_mission("Elsewhere", project=make_project("other"))[0]

    first = api.get("/missions", {"limit": 2, "project": made[0].project_id}).json()
    second = api.get(
        "/missions", {"limit": 2, "project": made[0].project_id, "cursor": first["next"]}
    ).json()
    third = api.get(
        "/missions", {"limit": 2, "project": made[0].project_id, "cursor": second["next"]}
    ).json()

    pages = [[item["goal"] for item in page["items"]] for page in (first, second, third)]
    assert pages == [["Goal 4", "Goal 3"], ["Goal 2", "Goal 1"], ["Goal 0"]]
    assert third["next"] is None
    everything = api.get("/missions").json()
    assert [item["id"] for item in everything["items"]] == [
        other.pk,
        *[m.pk for m in reversed(made)],
    ]
    assert everything["next"] is None


@pytest.mark.parametrize("cursor", ["not a cursor", "WzEsMl0", "eyJhIjoxfQ", "W10", "%%%"])
def test_it_refuses_a_cursor_it_did_not_give(api: Api, cursor: str) -> None:
    make_mission()

    response = api.get("/missions", {"cursor": cursor})

    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_cursor"


def test_it_refuses_to_list_the_missions_of_an_unknown_project(api: Api, db: None) -> None:
    assert api.get("/missions", {"project": 999999}).status_code == 404


def test_each_listed_mission_has_its_status_as_the_console_shows_it(api: Api) -> None:
    _done, run = make_mission("Done, then forked")
    add_steps(run, 2)
    end_run(run, "done")
    runs.fork_run(run.pk, at_seq=1)  # a later root run: the mission's outcome stays done
    _failed, run = make_mission("Failed")
    end_run(run, "failed")
    _paused, run = make_mission("Paused")
    runs.pause_run(run.pk)
    make_mission("Queued")

    items = api.get("/missions").json()["items"]

    listed = {item["goal"]: item["status"] for item in items}
    assert listed == {
        "Done, then forked": "done",
        "Failed": "failed",
        "Paused": "paused",
        "Queued": "queued",
    }
    assert {row.goal: row.state.value for row in overview.missions() if row.state} == listed
    # One mission's own page says the same.
    assert {
        item["goal"]: api.get(f"/missions/{item['id']}").json()["status"] for item in items
    } == (listed)


def test_it_lists_missions_in_as_many_queries_for_many_as_for_one(api: Api) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert api.get("/missions").status_code == 200
        return len(captured)

    make_mission("One")
    queries()  # the token's last use is written once a minute: not part of the count
    one = queries()
    for n in range(6):
        _mission, run = make_mission(f"More {n}")
        end_run(run, "failed" if n % 2 else "done")

    assert queries() == one


def test_it_shows_a_mission_with_its_spend_and_runs(api: Api) -> None:
    mission, run = make_mission()
    add_steps(run, 2)
    Run.objects.filter(pk=run.pk).update(
        input_tokens=300, output_tokens=30, usd_micros=3000, turns=2
    )

    body = api.get(f"/missions/{mission.pk}").json()

    assert body["spent"] == {"tokens": 330, "usd_micros": 3000, "turns": 2, "tool_calls": 0}
    assert body["runs"] == {"total": 1, "by_status": {"queued": 1}, "root_run_ids": [run.pk]}
    assert body["goal"] == "Write the release notes."
    assert api.get("/missions/999999").status_code == 404


# --- risk class: the sandbox level its runs work at ----------------------------------------------


def test_a_research_mission_runs_at_level_0_with_read_only_tools(
    api: Api, with_key: None, tmp_path: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    project = Project.objects.create(name="research", repository=str(tmp_path))

    response = api.post(
        "/missions", {"project_id": project.pk, **MISSION, "risk_class": "research"}
    )

    assert response.status_code == 201
    assert (response.json()["risk_class"], response.json()["sandbox_level"]) == ("research", 0)
    spec = Run.objects.get().input
    assert spec["sandbox_level"] == 0
    assert {"read_file", "list_files", "search", "memory_search"} <= set(spec["tools"])
    assert not {"shell", "edit_file", "write_file", "git_commit", "git_status", "merge_work"} & set(
        spec["tools"]
    )
    assert "read-only research" in spec["instructions"]


def test_a_mission_whose_level_no_node_offers_is_refused_and_nothing_is_kept(
    api: Api, with_key: None
) -> None:
    Node.objects.update_or_create(name="local", defaults={"enabled": False})

    response = api.post(
        "/missions", {"project_id": make_project().pk, **MISSION, "risk_class": "untrusted"}
    )

    assert response.status_code == 400
    assert error_of(response) == {
        "code": "sandbox_unavailable",
        "message": "This mission's risk class needs sandbox level 2 (a virtual machine per"
        " task): no node can run a level-2 step now (no nodes).",
        "details": None,
    }
    assert not Mission.objects.exists()
    assert not Run.objects.exists()


def test_an_unknown_risk_class_is_refused_by_the_schema(api: Api, with_key: None) -> None:
    response = api.post(
        "/missions", {"project_id": make_project().pk, **MISSION, "risk_class": "yolo"}
    )

    assert response.status_code == 422
    assert "risk_class" in response.content.decode()


def test_a_mission_names_the_bridges_and_hosts_it_needs_and_its_run_gets_them(
    api: Api, with_key: None
) -> None:
    from agentos.core.audit import Actor
    from cluster import bridges
    from missions import network

    bridges.put("search", base_url="https://search.example.org", secret="k" * 12, actor=Actor())
    project = make_project()
    for bad, why in (
        ({"bridges": ["nope"]}, "No bridge named nope"),
        ({"allowed_hosts": ["*"]}, "never every host"),
        ({"allowed_hosts": ["a b"]}, "is not a host"),
    ):
        refused = api.post("/missions", {"project_id": project.pk, **MISSION, **bad})
        assert refused.status_code == 400, refused.json()
        assert why in str(error_of(refused)["message"])
    assert not Mission.objects.exists()
    response = api.post(
        "/missions",
        {
            "project_id": project.pk,
            **MISSION,
            "bridges": ["search"],
            "allowed_hosts": ["Docs.Example.org", "*.pypi.org:443"],
            "sensitive": True,
        },
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["bridges"], body["allowed_hosts"], body["sensitive"]) == (
        ["search"],
        ["*.pypi.org:443", "docs.example.org"],
        True,
    )
    run = Run.objects.get()
    assert run.input["bridges"] == ["search"]
    assert run.input["sensitive"] is True
    assert network.needs(run.pk) == ["egress", "bridge:search"]
    assert network.decide(run.pk, "files.pypi.org", 443).allowed
    assert not network.decide(run.pk, "files.pypi.org", 80).allowed
