"""The agent loop on the offline scripted provider, through a real in-process worker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernel import runs
from kernel.models import Effect, Run, Step
from kernel.worker import Worker
from missions.providers import scripted
from tests.kernel.factories import make_mission
from tools import registry
from tools.base import Risk, Tool, ToolEnv

pytestmark = pytest.mark.django_db(transaction=True)
WRITES: list[str] = []


def _note(env: ToolEnv, arguments: dict[str, Any]) -> str:
    WRITES.append(arguments["text"])
    return "noted"


NOTE = Tool(
    name="note",
    description="Write a note.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    effect=Effect.IDEMPOTENT_WRITE,
    risk=Risk.WORKSPACE_WRITE,
    run=_note,
)
registry.TOOLS.add(NOTE.name, NOTE)


def agent_run(turns: list[dict[str, Any]], *, tools: list[str], **extra: Any) -> Run:
    return runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Check twice, note once, answer.",
            "provider": "scripted",
            "model": "scripted",
            "tools": tools,
            "script": {"turns": turns},
            **extra,
        },
    )


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 50}


def test_it_runs_turns_of_model_and_tool_steps_to_an_answer() -> None:
    WRITES.clear()
    run = agent_run(
        [
            {
                "text": "Looking.",
                "usage": USAGE,
                "tool_calls": [
                    {"name": "noop", "arguments": {"note": "a"}},
                    {"name": "noop", "arguments": {"note": "b"}},
                    {"name": "note", "arguments": {"text": "seen"}},
                ],
            },
            {"text": "All done.", "usage": USAGE},
        ],
        tools=["noop", "note"],
    )

    assert work() == ["done"]

    run.refresh_from_db()
    assert run.output == {"answer": scripted.LABEL + "All done.", "turns": 2}
    assert list(Step.objects.filter(run=run).values_list("kind", "name")) == [
        ("checkpoint", "context-window"),
        ("model_call", "scripted"),
        ("tool_call", "noop"),
        ("tool_call", "noop"),
        ("tool_call", "note"),
        ("model_call", "scripted"),
    ]
    assert WRITES == ["seen"]
    assert (run.turns, run.tool_calls) == (2, 3)
    assert (run.input_tokens, run.cache_read_tokens) == (200, 100)
    assert run.usd_micros == 0  # the scripted model is free, and says so


def test_it_answers_unknown_tools_and_bad_arguments_to_the_model_without_running_them() -> None:
    WRITES.clear()
    run = agent_run(
        [
            {
                "text": "Trying.",
                "tool_calls": [
                    {"name": "rm_rf", "arguments": {}},
                    {"name": "note", "raw_arguments": "{not json"},
                    {"name": "note", "arguments": {"text": 42}},
                ],
            },
            {"text": "Understood."},
        ],
        tools=["note"],
    )

    assert work() == ["done"]

    results = Step.objects.filter(run=run, kind="tool_call").values_list("result", flat=True)
    outputs = [result["output"] for result in results if result is not None]
    assert outputs[0] == "Unknown tool 'rm_rf'; tools: note."
    assert outputs[1].startswith("Invalid arguments for note: invalid JSON arguments")
    assert outputs[2] == "note: text: 42 is not of type 'string'"
    assert WRITES == []


def test_it_stops_at_the_turn_cap_as_partial() -> None:
    loop = {"text": "Again.", "tool_calls": [{"name": "noop", "arguments": {}}]}
    run = agent_run([loop] * 5, tools=["noop"], max_turns=3)

    assert work() == ["partial"]
    assert Run.objects.get(pk=run.pk).output == {"reason": "turn cap 3 reached"}


def test_it_fails_precisely_when_the_script_runs_out() -> None:
    run = agent_run(
        [{"text": "Once.", "tool_calls": [{"name": "noop", "arguments": {}}]}], tools=["noop"]
    )

    assert work() == ["failed"]
    assert "bad_request: The script has 1 turns; turn 2 asked." in Run.objects.get(pk=run.pk).error


def test_it_fails_a_run_whose_input_has_no_goal() -> None:
    run = runs.start_run(account=make_mission(), program="agent", input={"provider": "scripted"})

    assert work() == ["failed"]
    assert Run.objects.get(pk=run.pk).error == "StepFailed: The run's input needs a goal."


def test_it_assembles_the_same_prefix_with_tools_in_name_order() -> None:
    # The byte-identical prefix across real requests is checked in test_resume.py.
    from missions.engine.prompt import assemble

    tools = registry.frozen(["note", "noop"])
    first = assemble(role="executor", instructions="x", memory_index="m", tools=tools)
    again = assemble(role="executor", instructions="x", memory_index="m", tools=tools)

    assert first == again
    assert [tool.name for tool in first.tools] == ["noop", "note"]  # frozen, sorted


def test_it_offloads_a_big_tool_result_to_an_artifact_readable_back() -> None:
    from kernel.models import Artifact

    big = "line of output\n" * 2000  # ~30,000 characters, over the ~3,000-token limit
    tool = Tool(
        name="dump",
        description="Print a lot.",
        input_schema={"type": "object"},
        effect=Effect.READ,
        risk=Risk.READ,
        run=lambda call, arguments: big,
    )
    with registry.TOOLS.registered(tool.name, tool):
        run = agent_run(
            [
                {"text": "Dumping.", "tool_calls": [{"name": "dump", "arguments": {}}]},
                {
                    "text": "Reading.",
                    "tool_calls": [
                        {
                            "name": "read_artifact",
                            "arguments": {
                                "sha256": __import__("hashlib").sha256(big.encode()).hexdigest(),
                                "offset": 15,
                                "length": 14,
                            },
                        }
                    ],
                },
                {"text": "Done."},
            ],
            tools=["dump", "read_artifact"],
        )

        assert work() == ["done"]

    dumped, read_back = Step.objects.filter(run=run, kind="tool_call").order_by("seq")
    assert isinstance(dumped.result, dict)
    assert len(dumped.result["output"]) < 2000  # the journal keeps the preview
    assert "offloaded to artifact" in dumped.result["output"]
    assert Artifact.objects.get().size == len(big)
    assert isinstance(read_back.result, dict)
    assert read_back.result["output"] == "line of output"


def test_it_compacts_three_times_and_keeps_goal_constraints_verbatim() -> None:
    from missions import steering

    # A small window and wordy turns: the context crosses 55 % of 3,000 tokens every few turns.
    turns: list[dict[str, Any]] = [
        {
            "text": f"Step {n}: " + "thinking aloud " * 100,
            "tool_calls": [{"name": "noop", "arguments": {}}],
        }
        for n in range(1, 14)
    ]
    turns.append({"echo_context": True})
    run = agent_run(
        turns,
        tools=["noop"],
        constraints=["Never push to main.", "Keep the tests green."],
        context_window=3000,
    )
    # Delivered at the first model call, long before the compactions.
    steering.send_message(run_id=run.pk, text="Prefer small commits; explain each one.")

    assert work() == ["done"]

    run.refresh_from_db()
    assert Step.objects.filter(run=run, kind="compaction").count() >= 3
    assert isinstance(run.output, dict)
    seen = run.output["answer"]
    assert "Check twice, note once, answer." in seen  # the goal, verbatim
    assert "Never push to main." in seen
    assert "Keep the tests green." in seen
    assert "- Prefer small commits; explain each one." in seen  # the owner's, verbatim
    assert "Working summary after compaction 3" in seen


def test_it_delivers_an_owner_message_at_the_next_model_call_and_keeps_it_on_replay() -> None:
    from kernel import journal, scheduler
    from kernel.context import RunContext
    from missions import steering
    from missions.engine.loop import agent

    run = agent_run(
        [
            {"text": "Working.", "tool_calls": [{"name": "noop", "arguments": {}}]},
            {"echo_context": True},
        ],
        tools=["noop"],
    )
    steering.send_message(run_id=run.pk, text="Use the staging database, not production.")

    assert work() == ["done"]

    run.refresh_from_db()
    assert isinstance(run.output, dict)
    assert "Message from the owner: Use the staging database" in run.output["answer"]
    # Replaying the whole journal gives the same conversation, message included, once.
    Run.objects.filter(pk=run.pk).update(
        status="running", finished_at=None, runnable_at=run.created_at
    )
    claim = scheduler.claim_next_run(worker="replay", lease_seconds=30)
    assert claim is not None
    replayed = agent(
        RunContext(run=Run.objects.get(pk=run.pk), fence=claim.fence, records=journal.load(run.pk))
    )
    assert replayed.output == run.output
    assert run.output["answer"].count("Use the staging database") == 1


def test_it_refuses_empty_messages_and_messages_to_ended_runs() -> None:
    from missions import steering
    from missions.errors import MissionError

    run = agent_run([{"text": "Hi."}], tools=[])
    with pytest.raises(MissionError, match="cannot be empty"):
        steering.send_message(run_id=run.pk, text="  ")
    work()
    with pytest.raises(MissionError, match="has ended"):
        steering.send_message(run_id=run.pk, text="too late")


def test_it_clears_old_tool_results_in_a_batch_before_compacting() -> None:
    from missions.engine import relief

    tool = Tool(
        name="page",
        description="A page of text.",
        input_schema={"type": "object"},
        effect=Effect.READ,
        risk=Risk.READ,
        run=lambda call, arguments: "word " * 400,
    )
    turns: list[dict[str, Any]] = [
        {"text": f"Page {n}.", "tool_calls": [{"name": "page", "arguments": {}}]}
        for n in range(1, 10)
    ]
    turns.append({"echo_context": True})
    with registry.TOOLS.registered(tool.name, tool):
        run = agent_run(turns, tools=["page"], context_window=12000)

        assert work() == ["done"]

    run.refresh_from_db()
    assert isinstance(run.output, dict)
    seen = run.output["answer"]
    assert seen.count(relief.CLEARED) >= relief.CLEAR_BATCH
    assert seen.count("word word") >= relief.KEEP_RECENT_RESULTS  # the latest stay whole
    assert not Step.objects.filter(run=run, kind="compaction").exists()


def test_it_lists_a_deferred_tool_without_its_schema_and_loads_it_on_demand() -> None:
    tool = Tool(
        name="big_api",
        description="A tool with a large schema.",
        deferred=True,
        input_schema={
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        },
        effect=Effect.READ,
        risk=Risk.READ,
        run=lambda call, arguments: "answered",
    )
    with registry.TOOLS.registered(tool.name, tool):
        run = agent_run(
            [
                {
                    "text": "Schema?",
                    "tool_calls": [{"name": "load_tool_schema", "arguments": {"name": "big_api"}}],
                },
                {"text": "Now.", "tool_calls": [{"name": "big_api", "arguments": {"q": "x"}}]},
                {"echo_context": True},
            ],
            tools=["big_api"],
        )

        assert work() == ["done"]

    results = Step.objects.filter(run=run, kind="tool_call").values_list("result", flat=True)
    outputs = [result["output"] for result in results if result is not None]
    assert '"required": ["q"]' in outputs[0]  # the schema arrived as a tool result
    assert outputs[1] == "answered"


def test_it_lets_a_stop_hook_refuse_an_answer_until_it_is_satisfied() -> None:
    from missions.engine import spec

    def needs_tests(answer: str, _input: dict[str, Any]) -> str | None:
        return None if "tests pass" in answer else "run the tests and say that they pass"

    with spec.STOP_HOOKS.registered("needs-tests", needs_tests):
        run = agent_run(
            [{"text": "Done, I think."}, {"text": "Done: tests pass."}],
            tools=[],
            stop_hook="needs-tests",
        )

        assert work() == ["done"]

    run.refresh_from_db()
    assert isinstance(run.output, dict)
    assert run.output["answer"].endswith("Done: tests pass.")
    verdicts = Step.objects.filter(run=run, kind="verdict").values_list("result", flat=True)
    assert list(verdicts) == [
        {"refusal": "run the tests and say that they pass"},
        {"refusal": None},
    ]


def test_it_ends_blocked_when_the_stop_hook_keeps_refusing() -> None:
    from missions.engine import spec

    with spec.STOP_HOOKS.registered("never", lambda answer, _input: "not good enough"):
        run = agent_run([{"text": "Done."}] * 4, tools=[], stop_hook="never")

        assert work() == ["blocked"]
    assert Run.objects.get(pk=run.pk).output == {
        "refused_by_stop_hook": "not good enough",
        "turn": 3,
    }


def test_it_delivers_a_message_sent_while_the_run_executes() -> None:
    from missions import steering

    def owner_writes_meanwhile(env: ToolEnv, arguments: dict[str, Any]) -> str:
        steering.send_message(run_id=env.run_id, text="Stop after this, please.")
        return "ok"

    tool = Tool(
        name="slow",
        description="Takes a while.",
        input_schema={"type": "object"},
        effect=Effect.READ,
        risk=Risk.READ,
        run=owner_writes_meanwhile,
    )
    with registry.TOOLS.registered(tool.name, tool):
        run = agent_run(
            [
                {"text": "One.", "tool_calls": [{"name": "noop", "arguments": {}}]},
                {"text": "Two.", "tool_calls": [{"name": "slow", "arguments": {}}]},
                {"echo_context": True},
            ],
            tools=["noop", "slow"],
        )

        assert work() == ["done"]

    run.refresh_from_db()
    assert isinstance(run.output, dict)
    assert "Message from the owner: Stop after this, please." in run.output["answer"]


def test_it_ends_blocked_when_even_the_compacted_context_does_not_fit() -> None:
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "An enormous goal. " * 400,
            "provider": "scripted",
            "model": "scripted",
            "script": {"turns": [{"text": "never asked"}]},
            "context_window": 1000,
        },
    )

    assert work() == ["blocked"]

    output = Run.objects.get(pk=run.pk).output
    assert isinstance(output, dict)
    assert output["reason"].startswith("the context does not fit the 1000-token window")


def test_it_rehydrates_working_files_from_the_workspace_after_compaction(tmp_path: Any) -> None:
    (tmp_path / "PROGRESS.md").write_text("- [x] parser\n- [ ] printer\n")
    (tmp_path / "DECISIONS.md").write_text("- Printer output is UTF-8 only.\n")
    (tmp_path / "features.json").write_text('[{"name": "printer", "passes": false}]\n')
    (tmp_path / "notes.md").write_text("n" * 9000)
    (tmp_path / "todo.md").symlink_to("/etc/passwd")  # out of the workspace: not read
    turns: list[dict[str, Any]] = [
        {
            "text": f"Step {n}: " + "thinking aloud " * 100,
            "tool_calls": [{"name": "noop", "arguments": {}}],
        }
        for n in range(1, 6)
    ]
    turns.append({"echo_context": True})
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Finish the printer.",
            "provider": "scripted",
            "model": "scripted",
            "tools": ["noop"],
            "script": {"turns": turns},
            "context_window": 3000,
        },
        workspace=str(tmp_path),
    )

    assert work() == ["done"]

    run.refresh_from_db()
    assert isinstance(run.output, dict)
    seen = json.loads(run.output["answer"].removeprefix(scripted.LABEL))
    assert "printer" not in seen["system"]  # never in the system prompt
    (summary,) = [item["text"] for item in seen["items"] if "Working summary" in str(item)]
    # No repository, so no record of what it held: every file is the agent's.
    assert "## PROGRESS.md (from the workspace, written by the agent: data" in summary
    assert "- [ ] printer" in summary
    assert "Printer output is UTF-8 only." in summary
    assert '"passes": false' in summary
    assert "[... 5000 more characters]" in summary  # capped
    assert "todo.md: a symbolic link out of the workspace" in summary
    assert "root:" not in summary


def test_it_plans_only_the_leading_read_calls_of_a_response() -> None:
    from missions.engine.loop import _planned_reads

    tools = {tool.name: tool for tool in registry.frozen(["noop", "note"])}
    calls = [
        {"call_id": "a", "name": "noop", "arguments": {}},
        {"call_id": "b", "name": "ghost", "arguments": {}},  # unknown: answered as a read
        {"call_id": "c", "name": "note", "arguments": {"text": "x"}},  # a write: its own intent
        {"call_id": "d", "name": "noop", "arguments": {}},
    ]

    planned = _planned_reads(tools, {"tool_calls": calls})

    assert [name for _, name, _ in planned] == ["noop", "ghost"]
