"""How the loop sizes its context: the provider's own token count before a decision taken on an
estimate, and the provider's server-side clearing of old tool results where the catalog says the
model has it. The real Anthropic SDK against the local wire-format server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kernel import runs
from kernel.models import Run, Step
from kernel.worker import Worker
from missions.engine import relief
from missions.engine.window import model_facts
from missions.models import ModelInfo
from tests.kernel.factories import make_mission
from tests.providers.anthropic_wire import error_body, message_start, reply, text, tool_use
from tests.providers.wire import Answer, Failure, Json, Stream, WireServer, wire_server

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-opus-5-5"
WINDOW = 2000  # clearing past 800 tokens, compaction past 1,100


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireServer]:
    with wire_server() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        yield server


def noop_turn(
    turn: int, *, input_tokens: int, context_management: dict[str, Any] | None = None
) -> Stream:
    return Stream(
        reply(
            tool_use(0, f"toolu_{turn}", "noop", json.dumps({"note": str(turn)})),
            stop_reason="tool_use",
            start=message_start(input_tokens=input_tokens),
            context_management=context_management,
        )
    )


FINAL = Stream(reply(text(0, "Finished.")))


def agent(server: WireServer, *answers: Answer) -> Run:
    server.queue(*answers)
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Call noop, then finish.",
            "provider": "anthropic",
            "model": MODEL,
            "tools": ["noop"],
            "context_window": WINDOW,
        },
    )
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]
    run.refresh_from_db()
    return run


def paths(server: WireServer) -> list[str]:
    return [received.path for received in server.received]


def test_it_asks_the_provider_to_count_before_compacting_on_an_estimate(
    server: WireServer,
) -> None:
    # The first answer reports 1,500 input tokens: past 55 % of the window by the figures the
    # loop has. The provider's count of the next request says 700: nothing to relieve.
    run = agent(server, noop_turn(1, input_tokens=1500), Json({"input_tokens": 700}), FINAL)

    assert paths(server) == ["/v1/messages", "/v1/messages/count_tokens", "/v1/messages"]
    counted, asked = server.received[1:]
    # What was counted is the request that was then sent (the same thread, prefix and tools).
    for field in ("model", "system", "tools", "messages"):
        assert counted.body[field] == asked.body[field], field
    steps = Step.objects.filter(run=run).order_by("seq")
    assert [(s.kind, s.name) for s in steps] == [
        ("checkpoint", "context-window"),
        ("model_call", MODEL),
        ("tool_call", "noop"),
        ("checkpoint", "count-tokens"),
        ("model_call", MODEL),
    ]
    assert steps[3].result == {"tokens": 700}


@pytest.mark.parametrize(
    ("count", "recorded"),
    [
        (Json({"input_tokens": 1500}), {"tokens": 1500}),
        (
            Failure(529, error_body("overloaded_error", "Overloaded")),
            {"tokens": None, "error": "overloaded: Overloaded"},
        ),
    ],
    ids=["count-confirms", "count-fails-estimate-decides"],
)
def test_it_compacts_when_the_count_confirms_or_cannot_be_had(
    server: WireServer, count: Answer, recorded: dict[str, Any]
) -> None:
    summary = Stream(reply(text(0, "Decisions: none yet.")))

    run = agent(server, noop_turn(1, input_tokens=1500), count, summary, FINAL)

    assert paths(server) == [
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/messages",  # the compaction
        "/v1/messages",
    ]
    assert server.received[2].body["system"][0]["text"] == relief.COMPACTION_SYSTEM
    assert Step.objects.get(run=run, name="count-tokens").result == recorded
    assert Step.objects.filter(run=run, kind="compaction").count() == 1
    assert run.output == {"answer": "Finished.", "turns": 2}


def tool_results(messages: list[dict[str, Any]]) -> list[Any]:
    return [
        block["content"]
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def test_it_counts_before_clearing_only_when_a_batch_could_be_cleared(server: WireServer) -> None:
    # Every turn reports 900 tokens, past the 40 % of clearing; a batch of old results (all
    # but the latest four) exists from the ninth turn: one count then, then one clearing.
    turns = [noop_turn(turn, input_tokens=900) for turn in range(1, 11)]
    answers: list[Answer] = [*turns[:8], Json({"input_tokens": 900}), *turns[8:], FINAL]

    agent(server, *answers)

    asked = paths(server)
    assert asked.count("/v1/messages/count_tokens") == 1
    assert asked.index("/v1/messages/count_tokens") == 8  # after eight turns, before the ninth
    ninth = tool_results(server.received[9].body["messages"])
    assert ninth == [relief.CLEARED] * 4 + [f"ok {turn}" for turn in (5, 6, 7, 8)]


def test_it_leaves_tool_result_clearing_to_a_provider_that_does_it_server_side(
    server: WireServer,
) -> None:
    ModelInfo.objects.filter(provider="anthropic", model=MODEL).update(
        capabilities={
            "context_management": {
                "supported": True,
                "clear_tool_uses_20250919": {"supported": True},
            }
        }
    )
    # Ten turns at 900 tokens: past the 40 % where the loop would clear old results itself
    # (and count first), short of the 55 % of a compaction.
    turns = [noop_turn(turn, input_tokens=900) for turn in range(1, 10)]
    edit = {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 5, "cleared_input_tokens": 450}
    turns.append(noop_turn(10, input_tokens=900, context_management={"applied_edits": [edit]}))

    run = agent(server, *turns, FINAL)

    assert set(paths(server)) == {"/v1/messages"}  # no count: no decision to check
    tenth = Step.objects.filter(run=run, kind="model_call").order_by("seq")[9]
    assert isinstance(tenth.result, dict)
    assert tenth.result["cleared"] == {"tool_results": 5, "tokens": 450}
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 800},
        "keep": {"type": "tool_uses", "value": relief.KEEP_RECENT_RESULTS},
        "clear_at_least": {"type": "input_tokens", "value": 100},
    }
    for received in server.received:
        assert received.body["context_management"] == {"edits": [edit]}
    # Our thread stays whole: every tool result of the last request is there in full.
    results = tool_results(server.received[-1].body["messages"])
    assert len(results) == 10
    assert relief.CLEARED not in results
    window = Step.objects.get(run=run, name="context-window")
    assert window.result == {"window": WINDOW, "server_clearing": True}


def test_it_still_reads_a_window_checkpoint_recorded_as_a_bare_number() -> None:
    # Runs recorded before the checkpoint said more than the window resume as they ran.
    assert model_facts(180_000) == (180_000, False)
    assert model_facts({"window": 5000, "server_clearing": True}) == (5000, True)
