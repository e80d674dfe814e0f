"""`POST /api/v1/missions` without any model key: an offline mission starts, a goal is refused
with a message that says it needs a model and where keys are set."""

from __future__ import annotations

import pytest

from kernel.models import Run
from missions import offline
from missions.blueprints import OfflineKey
from missions.models import Mission, Project
from tests.agentos.test_api import error_of
from tests.api.conftest import Api


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch, seeded_catalog: None) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(name="shop", repository="/srv/repositories/shop")


def test_it_starts_an_offline_mission(api: Api, shop: Project) -> None:
    response = api.post("/missions", {"project_id": shop.pk, "offline": "run-tests"})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["offline"] == "run-tests"
    assert body["goal"] == "Run the tests and report what fails."
    assert body["routes"]["executor"]["provider"] == "scripted"
    run = Run.objects.get(pk=body["run_id"])
    assert run.contract["offline"] == "run-tests"
    assert run.contract["trigger"] == "api"


def test_it_refuses_a_goal_without_a_model_and_says_where_keys_are_set(
    api: Api, shop: Project
) -> None:
    response = api.post("/missions", {"project_id": shop.pk, "goal": "Add a cart"})

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "no_provider"
    assert str(error["message"]).startswith("This goal needs a language model")
    assert "Set a provider key in Settings" in str(error["message"])
    assert error["details"] == {
        "settings": "http://testserver/settings/",
        "offline": ["run-tests", "survey"],
    }
    assert not Mission.objects.exists()


@pytest.mark.parametrize(
    "extra",
    [
        {"goal": "Add a cart"},
        {"definition_of_done": "The cart works."},
        {"routes": {"executor": {"provider": "scripted", "model": "scripted"}}},
    ],
)
def test_an_offline_mission_brings_its_own_goal_and_model(
    api: Api, shop: Project, extra: dict[str, object]
) -> None:
    response = api.post("/missions", {"project_id": shop.pk, "offline": "survey", **extra})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_input"
    assert not Mission.objects.exists()


def test_it_refuses_an_unknown_offline_mission(api: Api, shop: Project) -> None:
    response = api.post("/missions", {"project_id": shop.pk, "offline": "deploy"})

    assert response.status_code == 422
    assert not Mission.objects.exists()


def test_the_schema_names_every_offline_mission() -> None:
    assert set(OfflineKey.__args__) == set(offline.MISSIONS)  # type: ignore[attr-defined]


def test_a_mission_without_goal_or_offline_mission_does_not_match_the_schema(
    api: Api, shop: Project
) -> None:
    response = api.post("/missions", {"project_id": shop.pk})

    assert response.status_code == 422
    assert error_of(response)["code"] == "invalid_input"
