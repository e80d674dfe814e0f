"""A model step waiting to retry a provider's transient error ends at once when the run stops."""

from __future__ import annotations

import threading
import time

import pytest

from kernel import execution, runs, scheduler
from kernel.models import Run
from tests.kernel.factories import make_mission
from tests.polling import wait_for
from tests.providers.anthropic_wire import error_body, reply, text
from tests.providers.wire import Failure, Stream, WireServer, wire_server

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 3.0  # the lease keeper relays a stop request every third of it
RETRY_AFTER = 9  # what the provider asks (waited in the step); the wait must not last that long


def start_overloaded(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[Run, threading.Thread, list[str]]:
    server.queue(
        Failure(
            529, error_body("overloaded_error", "Overloaded"), {"retry-after": str(RETRY_AFTER)}
        ),
        Stream(reply(text(0, "Done."))),
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={"goal": "Say done.", "provider": "anthropic", "model": "claude-opus-5-5"},
    )
    claim = scheduler.claim_next_run(worker="test", lease_seconds=LEASE)
    assert claim is not None
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(execution.execute(claim)))
    worker.start()
    wait_for(
        lambda: len(server.received) == 1, timeout=30, message="the provider to refuse the call"
    )  # refused: the step now waits to retry
    return run, worker, outcome


def test_it_ends_the_retry_wait_at_once_when_the_run_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with wire_server() as server:
        run, worker, outcome = start_overloaded(server, monkeypatch)

        stopped = time.monotonic()
        runs.request_stop(run.pk, by="owner")
        worker.join(timeout=LEASE / 3 + 3)
        elapsed = time.monotonic() - stopped

        assert not worker.is_alive(), "the stop waited for the provider's retry-after"
        assert elapsed < LEASE / 3 + 2  # the relay (a third of the lease), then at once
        assert outcome == ["cancelled"]
        assert len(server.received) == 1  # not asked again after the stop


def test_it_retries_at_once_when_the_owner_interrupts_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with wire_server() as server:
        run, worker, outcome = start_overloaded(server, monkeypatch)

        runs.request_interrupt(run.pk, by="owner")
        worker.join(timeout=LEASE / 3 + 5)

        assert not worker.is_alive(), "the interrupt waited for the provider's retry-after"
        assert outcome == ["done"]
        assert len(server.received) == 2
