from __future__ import annotations

import pytest

from missions import routing
from missions.errors import MissionError
from tests.kernel.factories import make_mission

pytestmark = pytest.mark.django_db


def test_it_uses_the_role_default_when_its_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")

    route = routing.route_for(make_mission(), "executor")

    assert route == routing.Route("anthropic", "claude-opus-5-5", "medium")


def test_it_stands_in_the_labelled_scripted_model_without_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    route = routing.route_for(make_mission(), "executor")

    assert route == routing.Route("scripted", "scripted", None, scripted_stand_in=True)


def test_it_lets_a_mission_override_a_role(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    mission = make_mission()
    mission.routes = {"executor": {"provider": "openai", "model": "gpt-6.1-terra", "effort": "low"}}

    assert routing.route_for(mission, "executor") == routing.Route("openai", "gpt-6.1-terra", "low")


def test_it_refuses_an_unknown_role() -> None:
    with pytest.raises(MissionError, match="Unknown role 'janitor'"):
        routing.route_for(make_mission(), "janitor")


def test_it_fails_over_to_the_other_provider_only_with_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    route = routing.Route("anthropic", "claude-opus-5-5", "high")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert routing.failover_for(route) is None

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    other = routing.failover_for(route)
    assert other is not None
    assert other.provider == "openai"
