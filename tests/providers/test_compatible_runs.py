"""The compatible endpoint as a provider of runs: routed to, priced, listed, and the real agent
loop on it end to end (a real worker, the real `openai` SDK, a local Chat Completions server)."""

from __future__ import annotations

from typing import Any

import pytest

from kernel import runs
from kernel.models import RunStatus
from kernel.worker import Worker
from missions import catalog, endpoints, keys, routing
from missions.launch import create_mission
from missions.models import Mission, ModelInfo, ModelPrice, Project
from missions.providers import registry
from missions.providers.base import BadRequest
from tests.providers.compatible_wire import MODEL, Chat
from tests.providers.wire import Json, WireServer

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:8080/v1"


@pytest.fixture(autouse=True)
def _no_environment_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def mission() -> Mission:
    project, _ = Project.objects.get_or_create(name="local models")
    return Mission.objects.create(
        project=project,
        goal="Say done.",
        routes={"executor": {"provider": "compatible", "model": MODEL, "effort": None}},
    )


def test_a_role_routed_to_the_endpoint_stands_in_scripted_until_it_is_set(
    mission: Mission,
) -> None:
    assert routing.route_for(mission, "executor").scripted_stand_in

    endpoints.put(base_url=URL, model=MODEL)  # no key: a local server usually checks none

    assert routing.route_for(mission, "executor") == routing.Route("compatible", MODEL, None)


def test_it_neither_fails_over_to_nor_from_the_endpoint(
    monkeypatch: pytest.MonkeyPatch, seeded_catalog: None
) -> None:
    endpoints.put(base_url=URL, model=MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")

    assert routing.failover_for(routing.Route("compatible", MODEL, None)) is None
    failover = routing.failover_for(routing.Route("anthropic", "m", None))
    assert failover is not None
    assert failover.provider == "openai"


def test_a_mission_may_route_a_role_to_the_endpoint() -> None:
    project = Project.objects.create(name="p")
    route = {"provider": "compatible", "model": MODEL}
    endpoints.put(base_url=URL, model=MODEL)

    mission, run = create_mission(
        project=project, goal="x", routes={"executor": route}, trigger="api"
    )

    assert mission.routes["executor"]["provider"] == "compatible"
    assert (run.input["provider"], run.input["model"]) == ("compatible", MODEL)


def test_the_model_enters_the_catalog_free_and_an_owner_price_is_kept() -> None:
    endpoints.put(base_url=URL, model=MODEL, context_window=16384)
    price = ModelPrice.objects.get(provider="compatible", model=MODEL)
    price.input_per_mtok = 50_000
    price.save()

    endpoints.put(base_url=URL, model=MODEL)  # saved again without a window

    assert ModelPrice.objects.get(provider="compatible", model=MODEL).input_per_mtok == 50_000
    assert ModelInfo.objects.get(provider="compatible", model=MODEL).context_window == 16384
    assert catalog.default_model("compatible") == MODEL


def test_it_refuses_to_build_the_provider_without_an_endpoint() -> None:
    assert not registry.ready("compatible")
    with pytest.raises(BadRequest, match="set them in Settings"):
        registry.build("compatible")


def test_the_endpoint_key_goes_through_the_same_path_as_the_others() -> None:
    keys.put("compatible", "local-key-123456")

    (state,) = [item for item in keys.status() if item["provider"] == "compatible"]
    assert state["configured"] is True
    assert "local-key-123456" not in str(keys.status())


def test_it_refreshes_the_catalog_from_the_endpoints_model_listing(server: WireServer) -> None:
    endpoints.put(base_url=server.url + "/v1", model=MODEL)
    server.queue(
        Json(
            {
                "object": "list",
                "data": [
                    {"id": MODEL, "object": "model", "created": 0, "owned_by": "vllm",
                     "max_model_len": 32768},
                    {"id": "llama3.1", "object": "model", "created": 0, "owned_by": "ollama"},
                ],
            }
        )
    )  # fmt: skip

    rows = catalog.refresh("compatible")

    assert [(row.model, row.context_window) for row in rows] == [
        (MODEL, 32768),
        ("llama3.1", None),
    ]
    assert server.received[0].path == "/v1/models"


@pytest.mark.django_db(transaction=True)
def test_the_agent_loop_runs_end_to_end_on_the_endpoint(server: WireServer) -> None:
    endpoints.put(base_url=server.url + "/v1", model=MODEL)
    keys.put("compatible", "local-key-123456")
    turn = Chat().text("Noting.")
    turn.tool_call(0, "call_1", "noop", '{"no', 'te": "fr', 'om local"}')
    server.queue(
        turn.finish("tool_calls", prompt_tokens=40, completion_tokens=9),
        Chat().text("Finished.").finish_without_usage(),
    )
    project, _ = Project.objects.get_or_create(name="local models")
    mission = Mission.objects.create(project=project, goal="Call noop once, then finish.")
    run = runs.start_run(
        account=mission,
        program="agent",
        input={
            "goal": "Call noop once, then finish.",
            "provider": "compatible",
            "model": MODEL,
            "tools": ["noop"],
        },
    )

    assert Worker(lease_seconds=30).run_until_idle() == ["done"]

    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    assert (run.input_tokens, run.output_tokens, run.usd_micros) == (40, 9, 0)
    first, second = (request.body for request in server.received)
    assert [tool["function"]["name"] for tool in first["tools"]] == ["noop"]
    assert all(request.path == "/v1/chat/completions" for request in server.received)
    assert {k.lower(): v for k, v in server.received[0].headers.items()}["authorization"] == (
        "Bearer local-key-123456"
    )
    answered: list[dict[str, Any]] = second["messages"][-2:]
    assert answered[0]["tool_calls"][0]["function"] == {
        "name": "noop",
        "arguments": '{"note": "from local"}',
    }
    assert answered[1]["role"] == "tool"
    assert answered[1]["tool_call_id"] == "call_1"
    assert "ok from local" in answered[1]["content"]
