"""The compatible endpoint alone is enough to run a goal: an owner with no cloud key who sets
its base URL and model in Settings sees it set, and a mission with no routes of its own runs on
it for every role (a real worker, the real `openai` SDK, a local Chat Completions server)."""

from __future__ import annotations

import pytest
from django.test import Client

from agentos.core.tokens import create_token
from kernel.models import Run, RunStatus
from kernel.worker import Worker
from missions import endpoints, routing
from missions.errors import MissionError
from missions.launch import create_mission
from missions.models import Mission, Project, Role
from tests.factories import Owner
from tests.providers.compatible_wire import MODEL, Chat
from tests.providers.wire import WireServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_environment_keys(monkeypatch: pytest.MonkeyPatch, seeded_catalog: None) -> None:
    """A new owner: the seeded role defaults (cloud models), and no key at all."""
    for variable in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)


def test_a_plain_mission_runs_on_the_endpoint_once_it_is_set(
    server: WireServer, owner: Owner, client: Client
) -> None:
    project = Project.objects.create(name="local only")
    with pytest.raises(MissionError, match="no provider can be called") as refused:
        create_mission(project=project, goal="Say done.", trigger="api")
    assert refused.value.code == "no_provider"
    assert not Mission.objects.exists()  # nothing half-written

    endpoints.put(base_url=server.url + "/v1", model=MODEL)
    server.queue(Chat().text("Done.").finish(prompt_tokens=30, completion_tokens=2))
    secret = create_token(owner=owner.user, name="script").secret
    answered = client.post(
        "/api/v1/missions",
        {"project_id": project.pk, "goal": "Say done."},
        content_type="application/json",
        headers={"authorization": f"Bearer {secret}"},
    )
    assert answered.status_code == 201, answered.content
    mission = Mission.objects.get()
    run = Run.objects.get(pk=answered.json()["run_id"])

    assert mission.routes == {}
    assert (run.input["provider"], run.input["model"]) == ("compatible", MODEL)
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]
    run.refresh_from_db()
    assert run.status == RunStatus.DONE, run.error
    assert isinstance(run.output, dict)
    assert run.output["answer"] == "Done."
    (request,) = server.received
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == MODEL
    for role in Role.values:
        assert routing.route_for(mission, role) == routing.Route(
            "compatible", MODEL, routing.configured_route(mission, role).effort
        )


def test_a_cloud_key_keeps_its_defaults_and_a_named_route_is_not_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoints.put(base_url="http://127.0.0.1:9/v1", model=MODEL)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-0123456789")
    project = Project.objects.create(name="both")
    named = Mission.objects.create(
        project=project,
        goal="x",
        routes={"executor": {"provider": "openai", "model": "gpt-6.1-sol", "effort": None}},
    )

    executor = routing.default_route(Role.EXECUTOR)
    evaluator = routing.default_route(Role.EVALUATOR)

    assert executor is not None
    assert executor.provider == "anthropic"  # its key is set: the owner's default stands
    assert evaluator == routing.Route("compatible", MODEL, "medium")  # no OpenAI key
    assert routing.route_for(named, "executor").scripted_stand_in  # named: never replaced
    with pytest.raises(MissionError, match="the provider its route names, openai, cannot be"):
        create_mission(
            project=project,
            goal="x",
            routes={"executor": {"provider": "openai", "model": "gpt-6.1-sol"}},
            trigger="api",
        )


def test_the_new_mission_form_says_the_endpoint_is_set(
    owner_client: Client, server: WireServer
) -> None:
    Project.objects.create(name="local only")
    before = owner_client.get("/missions/new/").content.decode()
    assert "compatible: <strong>not set</strong>" in before
    assert 'id="no-model"' in before

    endpoints.put(base_url=server.url + "/v1", model=MODEL)
    after = owner_client.get("/missions/new/").content.decode()

    assert f"compatible: set ({MODEL} at {server.url}/v1)" in after
    assert 'id="no-model"' not in after
    assert f"Default (compatible/{MODEL})" in after


def test_the_agents_screen_says_each_role_runs_on_the_endpoint(
    owner_client: Client, server: WireServer
) -> None:
    before = owner_client.get("/agents/").content.decode()
    assert "no key: the offline model stands in" in before
    assert "Runs on the OpenAI-compatible endpoint" not in before

    endpoints.put(base_url=server.url + "/v1", model=MODEL)
    after = owner_client.get("/agents/").content.decode()

    assert "no key: the offline model stands in" not in after
    assert after.count(f"Runs on the OpenAI-compatible endpoint ({MODEL})") == len(Role.values)
