"""A real worker, SIGKILLed after its third model step, resumes the conversation: the provider
(the real Anthropic SDK against a local wire-format server) sees no request twice."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from kernel import runs
from kernel.models import Run, Step
from tests.kernel.factories import make_mission
from tests.live import crash_env
from tests.polling import wait_for
from tests.processes import stop
from tests.providers.anthropic_wire import reply, text, tool_use
from tests.providers.wire import Failure, Stream, wire_server

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


def worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "kernel_worker",
            "--lease",
            "2",
            "--poll",
            "0.2",
        ],
        env=env,
    )


def without_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **message,
            "content": [
                {key: value for key, value in block.items() if key != "cache_control"}
                for block in message["content"]
            ],
        }
        for message in messages
    ]


def test_it_resumes_after_a_kill_without_asking_the_model_again(tmp_path: Path) -> None:
    with wire_server() as server:
        for turn in (1, 2, 3):
            server.queue(
                Stream(
                    reply(
                        text(0, f"Turn {turn}."),
                        tool_use(1, f"toolu_{turn}", "noop", '{"note": ', f'"{turn}"}}'),
                        stop_reason="tool_use",
                    )
                )
            )
        server.queue(Stream(reply(text(0, "Finished."))))
        run = runs.start_run(
            account=make_mission(),
            program="agent",
            input={
                "goal": "Call noop three times, then finish.",
                "provider": "anthropic",
                "model": "claude-opus-5-5",
                "tools": ["noop"],
            },
        )
        # Steps: window checkpoint 1, model 2, tool 3, model 4, tool 5, model 6 (the third) ...
        env = crash_env(
            tmp_path,
            [{"run": run.pk, "point": "after_result_commit", "seq": 6}],
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=server.url,
        )
        first = worker(env)
        assert first.wait(timeout=60) == -9  # it killed itself at the crash point
        assert len(server.received) == 3
        second = worker(env)
        try:
            wait_for(
                lambda: Run.objects.get(pk=run.pk).is_terminal,
                timeout=60,
                message="the run to finish",
                interval=0.05,
            )
        finally:
            stop(second)

    run.refresh_from_db()
    assert run.status == "done", run.error
    assert run.output == {"answer": "Finished.", "turns": 4}
    requests = [r.body for r in server.received]
    assert len(requests) == 4  # four turns, four requests: none repeated after the kill
    assert [len(body["messages"]) for body in requests] == [1, 3, 5, 7]
    for earlier, later in itertools.pairwise(requests):
        # The prefix is byte-identical and the conversation only grows; only the conversation's
        # cache breakpoint moves, to the end of each request.
        assert json.dumps(later["system"]) == json.dumps(earlier["system"])
        assert json.dumps(later["tools"]) == json.dumps(earlier["tools"])
        grown = without_breakpoints(later["messages"])[: len(earlier["messages"])]
        assert json.dumps(grown) == json.dumps(without_breakpoints(earlier["messages"]))
    for previous, body in zip([None, *requests], requests, strict=False):
        # Breakpoints on the last block, and where the previous request ended (its last one).
        marked = [
            (index, len(message["content"]) - 1 == position)
            for index, message in enumerate(body["messages"])
            for position, block in enumerate(message["content"])
            if block.get("cache_control") == {"type": "ephemeral"}
        ]
        ends = [len(body["messages"]) - 1]
        if previous is not None:
            ends.insert(0, len(previous["messages"]) - 1)
        assert marked == [(index, True) for index in ends]
    model_steps = Step.objects.filter(run=run, kind="model_call")
    assert [s.executions for s in model_steps] == [1, 1, 1, 1]
    # The tool call after the kill had its intent committed with the model's answer (a planned
    # read): it ran once, after the resume.
    tool_steps = Step.objects.filter(run=run, kind="tool_call")
    assert [s.executions for s in tool_steps] == [1, 1, 1]
    # claude-opus-5-5 at 4 $ / 20 $ per Mtok: 12 input and 20 output tokens a turn.
    assert [s.usd_micros for s in model_steps] == [448] * 4
    assert run.usd_micros == 448 * 4


# A key the provider refuses asks the owner instead (tests/missions/test_outage.py).
@pytest.mark.parametrize(
    ("answer", "env", "error"),
    [
        (None, {"ANTHROPIC_API_KEY": ""}, "ANTHROPIC_API_KEY is not set"),
        (
            Failure(
                404,
                {
                    "type": "error",
                    "error": {"type": "not_found_error", "message": "model: claude-nope"},
                },
            ),
            {"ANTHROPIC_API_KEY": "test-key"},
            "unknown_model",
        ),
    ],
)
def test_it_fails_precisely_on_a_missing_key_or_an_unknown_model(
    monkeypatch: pytest.MonkeyPatch, answer: Failure | None, env: dict[str, str], error: str
) -> None:
    from kernel.worker import Worker

    with wire_server() as server:
        if answer is not None:
            server.queue(answer)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        for name, value in env.items():
            if value:
                monkeypatch.setenv(name, value)
            else:
                monkeypatch.delenv(name, raising=False)
        run = runs.start_run(
            account=make_mission(),
            program="agent",
            input={"goal": "Hello.", "provider": "anthropic", "model": "claude-nope"},
        )

        assert Worker(lease_seconds=30).run_until_idle() == ["failed"]

    run.refresh_from_db()
    assert error in run.error
    assert len(server.received) == (0 if answer is None else 1)  # no crash loop, no retries
