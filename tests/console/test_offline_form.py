"""The New mission form without any model key: the offline missions are offered and start, a
goal of the owner's is refused with where to set a key, and a relaunch stays offline."""

from __future__ import annotations

import pytest
from django.test import Client

from kernel.models import Run
from missions.models import Mission, Project
from tests.console.test_pages import text_of

REPO = "/srv/repositories/shop"  # never cloned here: the runs are only created


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch, seeded_catalog: None) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENTOS_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(name="shop", repository=REPO)


def test_it_offers_the_offline_missions_and_links_settings(
    owner_client: Client, shop: Project
) -> None:
    content = text_of(owner_client.get("/missions/new/"))

    assert 'id="no-model"' in content
    assert "No model can be called yet, so a goal of yours cannot run." in content
    assert '<a href="/settings/">Set a provider key in Settings</a>' in content
    assert 'name="offline" value="run-tests"' in content
    assert "Run the tests and report what fails" in content
    assert 'name="offline" value="survey"' in content
    assert "Survey this repository" in content


def test_it_starts_an_offline_mission(owner_client: Client, shop: Project) -> None:
    response = owner_client.post("/missions/new/", {"project": shop.pk, "offline": "run-tests"})

    assert response.status_code == 302, text_of(response)
    mission = Mission.objects.get()
    assert response["Location"] == f"/missions/{mission.pk}/"
    assert mission.goal == "Run the tests and report what fails."
    run = Run.objects.get(account=mission)
    assert run.contract["offline"] == "run-tests"
    assert run.contract["trigger"] == "console"
    assert run.input["provider"] == "scripted"
    assert run.input["repository"] == REPO
    page = text_of(owner_client.get(f"/runs/{run.pk}/"))
    assert 'id="run-offline"' in page
    assert "the offline model ran this offline mission: no language model was used" in page


def test_it_refuses_a_goal_without_a_model_and_links_settings(
    owner_client: Client, shop: Project
) -> None:
    response = owner_client.post("/missions/new/", {"project": shop.pk, "goal": "Add a cart"})

    assert response.status_code == 400
    content = text_of(response)
    assert "This goal needs a language model, and no provider can be called" in content
    assert "run-tests (Run the tests and report what fails)" in content
    assert '<a href="/settings/">Set a provider key in Settings</a>' in content
    assert not Mission.objects.exists()


def test_it_needs_a_goal_unless_an_offline_mission_is_chosen(
    owner_client: Client, shop: Project
) -> None:
    response = owner_client.post("/missions/new/", {"project": shop.pk, "goal": "  "})

    assert response.status_code == 400
    assert "This field is required." in text_of(response)
    assert not Mission.objects.exists()


def test_an_offline_mission_needs_a_repository(owner_client: Client) -> None:
    bare = Project.objects.create(name="no code")

    response = owner_client.post("/missions/new/", {"project": bare.pk, "offline": "survey"})

    assert response.status_code == 400
    assert "The offline missions run on a project&#x27;s repository" in text_of(response)
    assert not Mission.objects.exists()


def test_it_relaunches_an_offline_mission_as_offline(owner_client: Client, shop: Project) -> None:
    owner_client.post("/missions/new/", {"project": shop.pk, "offline": "survey"})
    first = Mission.objects.get()

    form = text_of(owner_client.get(f"/missions/new/?from={first.pk}"))

    assert 'name="offline" value="survey" id="id_offline_2" checked' in form
    # The form as it comes, sent back: a second survey, played offline again.
    response = owner_client.post("/missions/new/", {"project": shop.pk, "offline": "survey"})
    assert response.status_code == 302
    again = Mission.objects.exclude(pk=first.pk).get()
    assert Run.objects.get(account=again).contract["offline"] == "survey"
