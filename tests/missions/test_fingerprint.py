"""A run of the agent records the hashes of its frozen system prompt and of its tool list."""

from __future__ import annotations

import hashlib

import pytest
from django.test import Client

from kernel.models import Run
from missions.engine import fingerprint
from missions.engine.prompt import assemble
from tests.missions.test_loop import agent_run, work
from tools import registry

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = [{"text": "Done.", "usage": {"input_tokens": 1, "output_tokens": 1}}]


def test_it_records_the_prompt_and_tool_list_hashes_when_the_run_starts() -> None:
    run = agent_run(ANSWER, tools=["noop", "note"])
    other = agent_run(ANSWER, tools=["noop"])

    assert work() == ["done", "done"]

    run.refresh_from_db()
    other.refresh_from_db()
    prefix = assemble(
        role="executor", instructions="", memory_index="", tools=registry.frozen(["noop", "note"])
    )
    assert run.prompt_hash == hashlib.sha256(prefix.system.encode()).hexdigest()
    assert run.tools_hash == fingerprint.tools_hash(prefix)
    assert len(run.tools_hash) == 64
    assert other.prompt_hash == run.prompt_hash  # same instructions...
    assert other.tools_hash != run.tools_hash  # ...other tools


def test_it_keeps_the_first_hashes_when_the_run_resumes() -> None:
    run = agent_run(ANSWER, tools=["noop"])
    Run.objects.filter(pk=run.pk).update(prompt_hash="a" * 64, tools_hash="b" * 64)

    assert work() == ["done"]

    run.refresh_from_db()
    assert (run.prompt_hash, run.tools_hash) == ("a" * 64, "b" * 64)


def test_it_shows_the_engine_version_and_hashes_on_the_run_page_and_in_the_api(
    owner_client: Client,
) -> None:
    run = agent_run(ANSWER, tools=["noop"])
    assert work() == ["done"]
    run.refresh_from_db()

    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    detail = owner_client.get(f"/api/v1/runs/{run.pk}").json()

    assert 'id="run-engine"' in page
    assert f'title="{run.prompt_hash}"' in page
    assert f'title="{run.tools_hash}"' in page
    assert (detail["engine_version"], detail["prompt_hash"], detail["tools_hash"]) == (
        "1",
        run.prompt_hash,
        run.tools_hash,
    )
