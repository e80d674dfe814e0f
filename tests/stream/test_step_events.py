"""Steps announce themselves in the event log (a trigger on kernel_step), numbered like all."""

from __future__ import annotations

import pytest

from kernel import runs, stream
from kernel.models import Event, Step
from kernel.worker import Worker
from tests.kernel.factories import start
from tests.stream import programs  # noqa: F401  # registers the programs

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_records_when_steps_start_and_complete_reads_when_they_complete() -> None:
    run = start("test.stream.story", {"steps": 1})
    Worker(lease_seconds=30).run_until_idle()
    stream.sequence()

    events = stream.page(0, 100)

    assert [(e["kind"], e["seq"]) for e in events] == [
        ("run.created", None),
        ("step.started", 1),  # a model call
        ("step.completed", 1),
        ("step.completed", 2),  # a read takes milliseconds: announced once, done
        ("step.started", 3),  # a write
        ("step.completed", 3),
        ("run.finished", None),
    ]
    assert {e["run"] for e in events} == {run.pk}
    # Step events are written without their mission; the stream reads it from the run.
    assert {e["account"] for e in events} == {run.account_id}
    assert Event.objects.filter(kind__startswith="step.", account__isnull=True).count() == 5
    model, tool = events[2], events[3]
    assert events[1]["data"] == {"kind": "model_call", "name": "m", "effect": "model_call"}
    assert model["trust"] == "agent"
    assert model["data"] == {
        "kind": "model_call",
        "name": "m",
        "settled_by": "executed",
        "text": "Looking.",
        "input_tokens": 12,
        "output_tokens": 3,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "usd_micros": 40,
    }
    assert tool["trust"] == "tool"  # a tool's output is data, never the system's word
    assert tool["data"]["is_error"] is True
    assert tool["data"]["name"] == "read_file"
    assert "text" not in tool["data"]


def test_it_completes_the_steps_a_fork_copies() -> None:
    run = start("test.stream.story", {"steps": 1})
    Worker(lease_seconds=30).run_until_idle()

    fork = runs.fork_run(run.pk, at_seq=2)
    stream.sequence()

    copied = [
        (e["kind"], e["seq"])
        for e in stream.page(0, 100)
        if e["run"] == fork.pk and e["kind"].startswith("step.")
    ]
    assert copied == [("step.started", 1), ("step.completed", 1), ("step.completed", 2)]
    assert Step.objects.filter(run=fork).count() == 2


def test_it_shows_what_a_wait_asks() -> None:
    start("test.stream.story", {"ask": True})
    Worker(lease_seconds=30).run_until_idle()
    stream.sequence()

    (opened,) = [e for e in stream.page(0, 100) if e["kind"] == "wait.opened"]

    assert opened["wait"] is not None
    assert opened["wait"]["kind"] == "human"
    assert opened["wait"]["type"] == "question"
    assert opened["wait"]["text"] == "Go on?"
    assert opened["wait"]["choices"] == ["yes", "no"]
    assert opened["wait"]["id"] == opened["data"]["wait"]


def test_it_shows_an_approval_request() -> None:
    question = {
        "type": "approval",
        "tool": "git_push",
        "arguments": {"remote": "origin"},
        "args_hash": "abc",
        "risk": "external",
        "justification": "ship the fix",
    }
    start("test.stream.story", {"ask": True, "question": question})
    Worker(lease_seconds=30).run_until_idle()
    stream.sequence()

    (opened,) = [e for e in stream.page(0, 100) if e["kind"] == "wait.opened"]

    assert opened["wait"] is not None
    assert {key: opened["wait"][key] for key in ("type", "tool", "risk", "justification")} == {
        "type": "approval",
        "tool": "git_push",
        "risk": "external",
        "justification": "ship the fix",
    }
    assert "arguments" not in opened["wait"]  # the approval page shows those, not the stream
