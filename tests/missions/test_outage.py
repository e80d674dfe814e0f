"""A provider's outage is waited out durably: past the short in-step retries the model step holds
a timer and the run leaves its worker (waiting, no lease), then the same step asks again and the
run ends `done`; past the owner's horizon it fails saying how long and why."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_django.fixtures import Settings

from approvals import service
from approvals.models import Question
from kernel import runs
from kernel.models import Run, RunStatus, Step, Wait, WaitKind, WaitState
from kernel.worker import Worker
from missions import contracts, endpoints
from missions.engine.spec import Spec
from tests.kernel.factories import make_mission
from tests.polling import wait_for
from tests.providers import compatible_wire
from tests.providers.anthropic_wire import error_body, reply, text
from tests.providers.openai_wire import Responses
from tests.providers.wire import Failure, Stream, WireServer, wire_server

pytestmark = pytest.mark.django_db(transaction=True)

OVERLOADED = Failure(529, error_body("overloaded_error", "Overloaded"))


@pytest.fixture
def anthropic(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Iterator[WireServer]:
    settings.PROVIDER_RETRY_SECONDS = 1  # the first hold: half a second to a second
    with wire_server() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        yield server


def start() -> Run:
    return runs.start_run(
        account=make_mission(),
        program="agent",
        input={"goal": "Hello.", "provider": "anthropic", "model": "claude-opus-5-5"},
    )


def test_it_waits_out_an_overloaded_provider_without_holding_a_worker(
    anthropic: WireServer, owner_client: Client
) -> None:
    # Two attempts in the step, then held; the held step's first attempt fails too, then it
    # recovers: longer than the in-step retries, with a second hold in between.
    anthropic.queue(OVERLOADED, OVERLOADED, OVERLOADED, OVERLOADED, Stream(reply(text(0, "Hi."))))
    run = start()
    worker = Worker(lease_seconds=30)

    assert worker.run_until_idle() == ["waiting"]

    run.refresh_from_db()
    assert (run.status, run.lease_owner, run.lease_expires_at) == (RunStatus.WAITING, "", None)
    assert len(anthropic.received) == 2
    hold = Wait.objects.get(run=run, kind=WaitKind.TIMER)
    assert hold.state == WaitState.OPEN
    assert hold.question["outage"]["said"] == "Anthropic overloaded (529)"
    assert hold.due_at is not None
    assert run.runnable_at == hold.due_at
    assert timezone.now() < hold.due_at <= timezone.now() + timedelta(seconds=1)
    step = Step.objects.get(run=run, seq=hold.seq)
    assert (step.kind, step.finished_at) == ("model_call", None)  # it will ask again itself

    page = owner_client.get(reverse("console:run", args=[run.pk])).content.decode()
    assert "Anthropic overloaded (529); retrying at" in page
    detail = owner_client.get(f"/api/v1/runs/{run.pk}").json()
    assert detail["status"] == "waiting"
    assert detail["waiting_on"]["said"] == "Anthropic overloaded (529)"
    assert detail["waiting_on"]["holds"] == 1
    assert detail["waiting_on"]["owner"] is False
    page = owner_client.get(reverse("console:mission", args=[run.account_id])).content.decode()
    assert f"Run {run.pk}: Anthropic overloaded (529); retrying at" in page
    mission = owner_client.get(f"/api/v1/missions/{run.account_id}").json()
    assert [(wait["run_id"], wait["said"]) for wait in mission["waiting_on"]] == [
        (run.pk, "Anthropic overloaded (529)")
    ]

    # Claimed before its timer is due (as after a crash between the hold and the suspension):
    # it waits again, the provider not asked. (The timer is moved out of a slow machine's
    # reach for this, then back to a moment from now.)
    due = timezone.now() + timedelta(seconds=30)
    Wait.objects.filter(pk=hold.pk).update(due_at=due)
    Run.objects.filter(pk=run.pk).update(runnable_at=timezone.now())
    assert worker.run_until_idle() == ["waiting"]
    assert len(anthropic.received) == 2
    run.refresh_from_db()
    assert run.runnable_at == due
    soon = timezone.now() + timedelta(seconds=0.5)
    Wait.objects.filter(pk=hold.pk).update(due_at=soon)
    Run.objects.filter(pk=run.pk).update(runnable_at=soon)

    outcomes: list[str] = []

    def ended() -> bool:
        outcomes.extend(worker.run_until_idle())
        return "done" in outcomes

    wait_for(
        ended,
        timeout=20,
        message="the held run to be claimed again when its timer is due, and to end",
    )

    assert outcomes == ["waiting", "done"]
    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    assert len(anthropic.received) == 5
    # The same step asked again, and answered: one model step in the journal.
    assert [s.seq for s in Step.objects.filter(run=run, kind="model_call")] == [hold.seq]
    hold.refresh_from_db()
    assert hold.state == WaitState.EXPIRED
    assert hold.question["outage"]["holds"] == 2
    detail = owner_client.get(f"/api/v1/runs/{run.pk}").json()
    assert detail["waiting_on"] is None


def test_it_fails_precisely_past_the_horizon(anthropic: WireServer, settings: Settings) -> None:
    settings.PROVIDER_OUTAGE_HOURS = 6
    anthropic.queue(OVERLOADED, OVERLOADED, OVERLOADED, OVERLOADED)
    run = start()
    worker = Worker(lease_seconds=30)
    assert worker.run_until_idle() == ["waiting"]
    # The outage began seven hours ago, as far as the hold says, and its timer is due.
    now = timezone.now()
    Wait.objects.filter(run=run).update(created_at=now - timedelta(hours=7), due_at=now)
    Run.objects.filter(pk=run.pk).update(runnable_at=now)

    assert worker.run_until_idle() == ["failed"]

    run.refresh_from_db()
    assert run.error.startswith("StepFailed: the provider was unavailable for 6 h:")
    assert Wait.objects.get(run=run).state == WaitState.EXPIRED  # not waited on any more
    assert "Anthropic overloaded (529): Overloaded" in run.error
    assert len(anthropic.received) == 4


def test_it_holds_the_step_at_once_for_a_long_retry_after(anthropic: WireServer) -> None:
    limited = Failure(429, error_body("rate_limit_error", "Slow down."), {"retry-after": "120"})
    anthropic.queue(limited)
    run = start()

    assert Worker(lease_seconds=30).run_until_idle() == ["waiting"]

    assert len(anthropic.received) == 1  # not retried in the step: no worker held for 2 min
    hold = Wait.objects.get(run=run, kind=WaitKind.TIMER)
    assert hold.due_at is not None
    waited = (hold.due_at - hold.created_at).total_seconds()
    assert 119 <= waited <= 133  # the provider's pause, honoured, plus a little jitter
    assert hold.question["outage"]["said"] == "Anthropic rate limited (429)"


def test_the_owner_cuts_a_hold_short_from_the_run_page_and_the_api(
    anthropic: WireServer, owner_client: Client
) -> None:
    limited = Failure(429, error_body("rate_limit_error", "Slow down."), {"retry-after": "600"})
    anthropic.queue(limited, Stream(reply(text(0, "Hi."))))
    run = start()
    worker = Worker(lease_seconds=30)
    assert worker.run_until_idle() == ["waiting"]
    assert worker.run_until_idle() == []  # due in ten minutes

    page = owner_client.get(reverse("console:run", args=[run.pk])).content.decode()
    assert 'id="run-retry"' in page
    answered = owner_client.post(reverse("console:run-retry", args=[run.pk]))

    assert answered.status_code == 302
    assert worker.run_until_idle() == ["done"]
    assert len(anthropic.received) == 2
    assert owner_client.post(f"/api/v1/runs/{run.pk}/retry").json()["error"]["code"] == (
        "not_waiting_on_provider"
    )
    assert owner_client.post("/api/v1/runs/999999/retry").status_code == 404


def test_it_asks_the_owner_about_a_refused_key_then_retries_with_the_new_one(
    anthropic: WireServer, monkeypatch: pytest.MonkeyPatch, owner_client: Client
) -> None:
    refused = Failure(401, error_body("authentication_error", "invalid x-api-key"))
    anthropic.queue(refused, Stream(reply(text(0, "Hi."))))
    run = start()
    worker = Worker(lease_seconds=30)

    assert worker.run_until_idle() == ["waiting"]

    assert len(anthropic.received) == 1  # a refused key is not retried blindly
    (asked,) = Question.objects.filter(run=run)
    assert asked.question["text"].startswith("Anthropic refused the key (401): invalid x-api-key.")
    assert asked.question["choices"] == ["Retry", "Stop"]
    assert worker.run_until_idle() == []  # nothing to do until the owner answers
    detail = owner_client.get(f"/api/v1/runs/{run.pk}").json()
    assert detail["waiting_on"]["owner"] is True
    assert detail["waiting_on"]["question"] == asked.pk
    page = owner_client.get(reverse("console:run", args=[run.pk])).content.decode()
    assert "Anthropic refused the key (401); waiting for your answer" in page
    assert reverse("console:question", args=[asked.pk]) in page
    shown = owner_client.get(reverse("console:question", args=[asked.pk]))
    assert shown.status_code == 200
    assert "Fix its key in Settings" in shown.content.decode()

    monkeypatch.setenv("ANTHROPIC_API_KEY", "fixed-key")  # the owner fixed it
    service.answer(asked.pk, text="Retry")

    assert worker.run_until_idle() == ["done"]
    sent = {name.lower(): value for name, value in anthropic.received[1].headers.items()}
    assert sent["authorization"] == "Bearer fixed-key"  # the key read again, as fixed
    run.refresh_from_db()
    assert run.status == RunStatus.DONE


def test_it_fails_when_the_owner_stops_a_run_over_an_unpaid_account(
    anthropic: WireServer,
) -> None:
    anthropic.queue(Failure(402, error_body("billing_error", "Your credit balance is too low.")))
    run = start()
    worker = Worker(lease_seconds=30)
    assert worker.run_until_idle() == ["waiting"]
    (asked,) = Question.objects.filter(run=run)
    assert "out of quota or credit (402)" in asked.question["text"]

    service.answer(asked.pk, text="Stop")

    assert worker.run_until_idle() == ["failed"]
    run.refresh_from_db()
    assert (
        run.error == "StepFailed: Anthropic out of quota or credit (402): the owner ended the run"
    )
    assert len(anthropic.received) == 1


def test_it_still_fails_an_invalid_request_at_once(anthropic: WireServer) -> None:
    invalid = Failure(400, error_body("invalid_request_error", "messages: too many images"))
    anthropic.queue(invalid)
    run = start()

    assert Worker(lease_seconds=30).run_until_idle() == ["failed"]

    run.refresh_from_db()
    assert run.error == "StepFailed: anthropic: bad_request: messages: too many images"
    assert not Wait.objects.filter(run=run).exists()


def test_it_counts_what_a_failed_attempt_cost_even_across_a_hold(anthropic: WireServer) -> None:
    # The first attempt drops after `message_start` (its 12 input tokens are billed), the second
    # is refused: the step is held; then it answers (12 more).
    anthropic.queue(Stream(reply(text(0, "Hi.")), cut_after=1), OVERLOADED)
    run = start()
    worker = Worker(lease_seconds=30)
    assert worker.run_until_idle() == ["waiting"]
    hold = Wait.objects.get(run=run, kind=WaitKind.TIMER)
    assert hold.question["outage"]["lost_usage"]["input_tokens"] == 12

    anthropic.queue(Stream(reply(text(0, "Hi."))))
    Run.objects.filter(pk=run.pk).update(runnable_at=timezone.now())
    Wait.objects.filter(pk=hold.pk).update(due_at=timezone.now())
    assert worker.run_until_idle() == ["done"]

    step = Step.objects.get(run=run, seq=hold.seq)
    assert isinstance(step.result, dict)
    assert step.result["usage"]["input_tokens"] == 12  # the answer's own
    assert step.result["lost_usage"]["input_tokens"] == 12
    assert step.input_tokens == 24  # both metered


def test_a_child_fails_over_while_its_provider_is_waited_out(
    anthropic: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    parent = Spec(goal="g", provider="anthropic", model="claude-opus-5-5")
    mission = make_mission()
    route, failover = contracts._route(parent, mission, "planner", {}, [])
    assert (route.provider, failover) == ("anthropic", None)  # no outage: its own route

    anthropic.queue(OVERLOADED, OVERLOADED)
    run = start()
    assert Worker(lease_seconds=30).run_until_idle() == ["waiting"]

    route, failover = contracts._route(parent, mission, "planner", {}, [])
    assert route.provider == "openai"
    assert failover is not None
    assert failover["reason"] == "Anthropic overloaded (529): a run is waiting it out"

    runs.request_stop(run.pk, by="owner")  # a stopped run's hold is no sign of an outage
    route, failover = contracts._route(parent, mission, "planner", {}, [])
    assert (route.provider, failover) == ("anthropic", None)


def test_it_waits_out_openai_the_same_way(
    anthropic: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", anthropic.url + "/v1")  # the same local server
    busy = Failure(503, {"error": {"message": "Slow down", "type": "server_error", "code": None}})
    anthropic.queue(busy, busy, Responses("resp_1").message("msg_1", "Hi.").completed())
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={"goal": "Hello.", "provider": "openai", "model": "gpt-5.2"},
    )
    worker = Worker(lease_seconds=30)

    assert worker.run_until_idle() == ["waiting"]
    hold = Wait.objects.get(run=run, kind=WaitKind.TIMER)
    assert hold.question["outage"]["said"] == "OpenAI overloaded (503)"

    outcomes: list[str] = []

    def ended() -> bool:
        outcomes.extend(worker.run_until_idle())
        return "done" in outcomes

    wait_for(ended, timeout=20, message="the held OpenAI run to be asked again and end")
    assert outcomes == ["done"]
    assert len(anthropic.received) == 3


def test_it_waits_out_the_compatible_endpoint_the_same_way(anthropic: WireServer) -> None:
    # An owner-run server that is down for longer than the in-step retries (502 from its
    # proxy, twice), then back.
    endpoints.put(base_url=anthropic.url + "/v1", model=compatible_wire.MODEL)
    down = Failure(502, {"error": {"message": "Bad gateway", "type": "server_error"}})
    anthropic.queue(down, down, down, compatible_wire.Chat().text("Hi.").finish())
    run = runs.start_run(
        account=make_mission(),
        program="agent",
        input={"goal": "Hello.", "provider": "compatible", "model": compatible_wire.MODEL},
    )
    worker = Worker(lease_seconds=30)

    assert worker.run_until_idle() == ["waiting"]
    hold = Wait.objects.get(run=run, kind=WaitKind.TIMER)
    assert hold.question["outage"]["kind"] == "server_error"

    outcomes: list[str] = []

    def ended() -> bool:
        outcomes.extend(worker.run_until_idle())
        return "done" in outcomes

    wait_for(ended, timeout=30, message="the held run on the compatible endpoint to end")
    assert outcomes == ["done"]  # its held step failed once more, then got through
    assert len(anthropic.received) == 4
    run.refresh_from_db()
    assert run.status == RunStatus.DONE
