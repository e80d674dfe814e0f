"""Owner steering of runs: pause and resume, fork from a step."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kernel import runs
from kernel.exceptions import KernelError
from kernel.models import Run, Step
from kernel.worker import Worker
from tests.kernel.factories import make_mission
from tests.polling import wait_for
from tests.providers.anthropic_wire import reply, text, tool_use
from tests.providers.wire import Stream, wire_server

pytestmark = pytest.mark.django_db(transaction=True)


def scripted(turns: list[dict[str, Any]]) -> Run:
    return runs.start_run(
        account=make_mission(),
        program="agent",
        input={
            "goal": "Do as scripted.",
            "provider": "scripted",
            "model": "scripted",
            "tools": ["noop"],
            "script": {"turns": turns},
        },
    )


NOOP_TURN: dict[str, Any] = {"text": "Working.", "tool_calls": [{"name": "noop", "arguments": {}}]}


def test_a_paused_run_is_not_claimed_until_resumed(seeded_catalog: None) -> None:
    run = scripted([NOOP_TURN, {"text": "Done."}])
    runs.pause_run(run.pk)
    assert Worker(lease_seconds=30).run_until_idle() == []
    assert Run.objects.get(pk=run.pk).status == "queued"

    runs.resume_run(run.pk)
    assert Worker(lease_seconds=30).run_until_idle() == ["done"]


def test_pausing_a_running_run_parks_it_after_the_step_under_way(seeded_catalog: None) -> None:
    started, release = threading.Event(), threading.Event()

    from kernel.models import Effect
    from tools import registry
    from tools.base import Risk, Tool

    def slow(env: object, arguments: dict[str, object]) -> str:
        started.set()
        release.wait(10)
        return "slow done"

    tool = Tool(
        name="slow_step",
        description="Waits for the test.",
        input_schema={"type": "object"},
        effect=Effect.IDEMPOTENT_WRITE,
        risk=Risk.READ,
        run=slow,
    )
    with registry.TOOLS.registered(tool.name, tool):
        run = runs.start_run(
            account=make_mission(),
            program="agent",
            input={
                "goal": "Slowly.",
                "provider": "scripted",
                "model": "scripted",
                "tools": ["slow_step", "noop"],
                "script": {
                    "turns": [
                        {"tool_calls": [{"name": "slow_step", "arguments": {}}]},
                        NOOP_TURN,
                        {"text": "Done."},
                    ]
                },
            },
        )
        outcome: list[list[str]] = []
        worker = threading.Thread(
            target=lambda: outcome.append(Worker(lease_seconds=0.6).run_until_idle())
        )
        worker.start()
        assert started.wait(10)
        runs.pause_run(run.pk)
        # A lease renewal (every 0.2 s) reads the pause with the lease it extends, then relays it
        # to the executing run before its next renewal: two renewals after the pause, and it is
        # relayed.
        leases = [Run.objects.get(pk=run.pk).lease_expires_at]

        def renewed_twice() -> bool:
            lease = Run.objects.get(pk=run.pk).lease_expires_at
            if lease != leases[-1]:
                leases.append(lease)
            return len(leases) >= 3

        wait_for(
            renewed_twice, timeout=10, message="two lease renewals after the pause", interval=0.01
        )
        release.set()
        worker.join(10)

        run.refresh_from_db()
        assert outcome == [["waiting"]]
        assert run.paused
        slow_step = Step.objects.get(run=run, name="slow_step")
        assert slow_step.result == {"output": "slow done", "is_error": False}  # it finished
        assert not Step.objects.filter(run=run, seq__gt=slow_step.seq).exists()  # nothing after

        runs.resume_run(run.pk)
        assert Worker(lease_seconds=30).run_until_idle() == ["done"]


def test_pausing_an_ended_run_is_refused(seeded_catalog: None) -> None:
    run = scripted([{"text": "Done."}])
    Worker(lease_seconds=30).run_until_idle()
    with pytest.raises(KernelError, match="has ended"):
        runs.pause_run(run.pk)


def test_a_fork_replays_the_first_steps_without_asking_the_model_again(
    seeded_catalog: None,
) -> None:
    with wire_server() as server:
        for turn in (1, 2):
            server.queue(
                Stream(
                    reply(
                        text(0, f"Turn {turn}."),
                        tool_use(1, f"toolu_{turn}", "noop", '{"note": ', f'"{turn}"}}'),
                        stop_reason="tool_use",
                    )
                )
            )
        server.queue(Stream(reply(text(0, "First ending."))))
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ANTHROPIC_API_KEY", "test-key")
            patch.setenv("ANTHROPIC_BASE_URL", server.url)
            source = runs.start_run(
                account=make_mission(),
                program="agent",
                input={
                    "goal": "Call noop twice, then finish.",
                    "provider": "anthropic",
                    "model": "claude-opus-5-5",
                    "tools": ["noop"],
                },
            )
            Worker(lease_seconds=30).run_until_idle()
            assert len(server.received) == 3
            # Steps: 1 window, 2 model, 3 tool, 4 model, 5 tool, 6 model (the answer).
            fork = runs.fork_run(source.pk, at_seq=5)
            server.queue(Stream(reply(text(0, "Another ending."))))
            Worker(lease_seconds=30).run_until_idle()

    assert len(server.received) == 4  # only the model step after the fork point
    fork.refresh_from_db()
    assert fork.status == "done"
    assert fork.output is not None
    assert fork.output["answer"] == "Another ending."
    copied = Step.objects.filter(run=fork, seq__lte=5).order_by("seq")
    original = Step.objects.filter(run=source, seq__lte=5).order_by("seq")
    assert [(s.kind, s.name, s.result) for s in copied] == [
        (s.kind, s.name, s.result) for s in original
    ]
    assert {s.settled_by for s in copied} == {"forked"}
    assert fork.contract["forked_from"] == {"run": source.pk, "seq": 5}
    # The copied steps count toward nothing here: only the fork's own model step.
    source.refresh_from_db()
    assert (source.turns, source.tool_calls) == (3, 2)
    assert (fork.turns, fork.tool_calls) == (1, 0)


def test_a_fork_from_a_missing_or_unfinished_step_is_refused(seeded_catalog: None) -> None:
    run = scripted([{"text": "Done."}])
    with pytest.raises(KernelError, match="has no step 1"):
        runs.fork_run(run.pk, at_seq=1)
    Worker(lease_seconds=30).run_until_idle()
    with pytest.raises(KernelError, match="has no step 99"):
        runs.fork_run(run.pk, at_seq=99)
    with pytest.raises(KernelError, match="No run"):
        runs.fork_run(10**9, at_seq=1)
    with pytest.raises(KernelError, match="step 1 or later"):
        runs.fork_run(run.pk, at_seq=0)
