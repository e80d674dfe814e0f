"""One execution pipeline: missions created and started the same way by every trigger (schedules:
test_schedules); provider keys set from the console."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.exceptions import KernelError
from kernel.models import Run
from missions import keys
from missions.cron import parse_cron
from missions.errors import MissionError
from missions.launch import create_mission
from missions.models import Mission, Project, ProviderKey
from missions.providers import registry
from tests.providers.anthropic_wire import reply, text
from tests.providers.openai_wire import Responses
from tests.providers.wire import Answer, Stream, wire_server

pytestmark = pytest.mark.django_db

SCRIPT = {"turns": [{"text": "Done."}]}


@pytest.fixture
def project() -> Project:
    return Project.objects.create(name="p")


def test_a_mission_starts_its_root_run_with_the_trigger_recorded(project: Project) -> None:
    mission, run = create_mission(
        project=project,
        goal="  Write the report.  ",
        definition_of_done="A report exists.",
        caps={"max_usd_micros": 2_000_000},
        routes={"executor": {"provider": "scripted", "model": "scripted"}},
        trigger="api",
        script=SCRIPT,
    )
    assert mission.goal == "Write the report."
    assert mission.max_usd_micros == 2_000_000
    assert run.account_id == mission.pk
    assert run.contract["trigger"] == "api"
    assert run.input["constraints"] == ["Definition of done: A report exists."]


def first_request_of_a_mission_on(
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    route: dict[str, str],
    answer: Answer,
    *,
    base_path: str = "",
) -> tuple[dict[str, Any], Run]:
    """Launch a mission on `route` against the local wire server; its first request and run."""
    from kernel.worker import Worker

    with wire_server() as server:
        variable = registry.KEYS[route["provider"]]
        monkeypatch.setenv(variable, "test-key")
        # ANTHROPIC_BASE_URL, OPENAI_BASE_URL: the SDKs' own variables.
        monkeypatch.setenv(variable.replace("API_KEY", "BASE_URL"), server.url + base_path)
        server.queue(answer)
        _, run = create_mission(
            project=project, goal="Say done.", routes={"executor": route}, trigger="api"
        )

        assert Worker(lease_seconds=30).run_until_idle() == ["done"]

    return server.received[0].body, run


@pytest.mark.django_db(transaction=True)
def test_a_mission_on_a_real_model_thinks_adaptively_at_its_routes_effort(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    route = {"provider": "anthropic", "model": "claude-opus-5-5", "effort": "high"}
    answer = Stream(reply(text(0, "Done.")))

    asked, run = first_request_of_a_mission_on(project, monkeypatch, route, answer)

    assert asked["thinking"] == {"type": "adaptive"}
    assert asked["output_config"] == {"effort": "high"}
    assert run.input["thinking"] is True


@pytest.mark.django_db(transaction=True)
def test_a_mission_on_openai_asks_for_reasoning_summaries_and_one_prompt_cache(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    route = {"provider": "openai", "model": "gpt-6.1-sol", "effort": "low"}
    answer = Responses().message("msg_1", "Done.").completed()

    asked, run = first_request_of_a_mission_on(project, monkeypatch, route, answer, base_path="/v1")

    assert asked["reasoning"] == {"summary": "auto", "effort": "low"}
    assert asked["prompt_cache_key"] == f"agentos-run-{run.pk}"
    assert asked["store"] is False


# The caps are the kernel's to refuse (`validate_caps`); the goal and routes the mission's.
@pytest.mark.parametrize(
    ("arguments", "refusal", "message"),
    [
        ({"goal": " "}, MissionError, "needs a goal"),
        (
            {"goal": "x", "caps": {"max_dollars": 1}},
            KernelError,
            "Unknown budget cap 'max_dollars'",
        ),
        ({"goal": "x", "caps": {"max_turns": -1}}, KernelError, r"cannot be negative \(got -1\)"),
        ({"goal": "x", "caps": {"max_turns": "10"}}, KernelError, "must be an integer"),
        ({"goal": "x", "routes": {"boss": {}}}, MissionError, "Unknown role 'boss'"),
        (
            {"goal": "x", "routes": {"executor": {"provider": "acme", "model": "m"}}},
            MissionError,
            "acme",
        ),
        (
            {"goal": "x", "routes": {"executor": {"provider": "openai"}}},
            MissionError,
            "needs a model",
        ),
    ],
)
def test_bad_input_creates_nothing(
    project: Project, arguments: dict[str, object], refusal: type[Exception], message: str
) -> None:
    with pytest.raises(refusal, match=message):
        create_mission(project=project, trigger="api", script=SCRIPT, **arguments)  # type: ignore[arg-type]
    assert not Mission.objects.exists()
    assert not Run.objects.exists()


def test_without_a_key_or_a_script_nothing_is_created(
    project: Project, seeded_catalog: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissionError, match="This goal needs a language model, and no provider"):
        create_mission(project=project, goal="x", trigger="api")
    assert not Mission.objects.exists()


@pytest.mark.parametrize(
    ("cron", "message"),
    [("* * * *", "five fields"), ("61 * * * *", "Invalid cron"), ("a b c d e", "Invalid")],
)
def test_bad_cron_expressions_are_refused(cron: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cron(cron)


def test_provider_keys_are_write_only_and_encrypted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert not registry.has_key("openai")
    keys.put("openai", "sk-test-0123456789")
    stored = ProviderKey.objects.get(provider="openai")
    assert b"sk-test" not in bytes(stored.ciphertext)
    assert stored.hint == "6789"
    assert registry.has_key("openai")
    assert keys.get("openai") == "sk-test-0123456789"
    (openai,) = [s for s in keys.status() if s["provider"] == "openai"]
    assert openai["configured"] is True
    assert openai["source"] == "console"
    assert "sk-test-0123456789" not in str(keys.status())
    monkeypatch.setenv("OPENAI_API_KEY", "from-env-key")
    assert keys.get("openai") == "from-env-key"  # the environment wins
    assert keys.delete("openai")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert not registry.has_key("openai")
    with pytest.raises(MissionError, match="Unknown provider"):
        keys.put("acme", "0123456789")
    with pytest.raises(MissionError, match="8 to 500"):
        keys.put("openai", "short")
