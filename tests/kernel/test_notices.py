"""The owner is told once when a cap is 80 % used: a mission's spend and tokens, a root run's
wall time, the day's spend; through a real worker, the notice rows and their events."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from agentos.core import audit
from agentos.core.models import AuditEvent
from kernel import budgets
from kernel.budgets import Cost
from kernel.context import Done, RunContext
from kernel.exceptions import KernelError
from kernel.models import BudgetNotice, Effect, Event, GlobalBudget, ProviderSpend, StepKind
from kernel.programs import PROGRAMS, Outcome
from kernel.worker import Worker
from tests.kernel.factories import make_account, make_mission, start
from tests.kernel.test_runs import spender  # noqa: F401  # registers "test.spender"

pytestmark = pytest.mark.django_db

_traveller: list[time_machine.Traveller] = []


def dawdler(ctx: RunContext) -> Outcome:
    """Two free steps; the first takes `seconds` of (travelled) time."""
    for index in range(2):

        def execute(call: object, first: bool = index == 0) -> Done:
            if first:
                _traveller[0].shift(ctx.input["seconds"])
            return Done({"ok": True})

        ctx.step(
            StepKind.TOOL_CALL, effect=Effect.READ, name="t", request={"i": index}, execute=execute
        )
    return Outcome(output="done")


PROGRAMS.add("test.dawdler", dawdler)


def work() -> list[str]:
    return Worker(lease_seconds=30).run_until_idle()


def sent() -> list[str]:
    return sorted(BudgetNotice.objects.values_list("key", flat=True))


def events() -> list[Event]:
    return list(Event.objects.filter(kind="budget.notice").order_by("pk"))


def test_it_tells_the_owner_once_at_80_percent_of_a_missions_spend_and_tokens() -> None:
    # Calls of 1,000 µ$ and 100 tokens: 80 % of each cap at the 16th, then 2 more calls (one
    # from another run), never the cap itself.
    mission = make_mission(max_usd_micros=20_000, max_tokens=2_000)
    run = start("test.spender", {"calls": 17}, account=mission)

    assert work() == ["done"]
    again = start("test.spender", {"calls": 1}, account=mission)
    assert work() == ["done"]

    assert sent() == [f"account:{mission.pk}:max_tokens", f"account:{mission.pk}:max_usd_micros"]
    assert [(e.account_id, e.run_id) for e in events()] == [(mission.pk, run.pk)] * 2
    assert "80 % of its spend cap" in " ".join(e.data["message"] for e in events())
    assert again.pk != run.pk


def test_it_says_nothing_under_80_percent() -> None:
    mission = make_mission(max_usd_micros=10_000)
    start("test.spender", {"calls": 7}, account=mission)

    assert work() == ["done"]

    assert sent() == []
    assert events() == []


def test_it_tells_the_owner_once_at_80_percent_of_the_days_spend() -> None:
    budgets.set_global_caps({"daily_usd_micros": 10_000}, actor=audit.Actor.command("test"))
    start("test.spender", {"calls": 8})
    start("test.spender", {"calls": 1})

    assert work() == ["done", "done"]

    day = timezone.now().date().isoformat()
    assert sent() == [f"day:{day}"]
    assert len(events()) == 1


def test_it_tells_the_owner_once_at_80_percent_of_a_root_runs_wall_time() -> None:
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        _traveller[:] = [traveller]
        run = start(
            "test.dawdler", {"seconds": 85}, caps={"max_seconds": 100}, account=make_account()
        )

        assert work() == ["done"]

    assert sent() == [f"run:{run.pk}:max_seconds"]
    assert len(events()) == 1


def test_a_root_run_waiting_on_the_owner_is_woken_to_tell_at_80_percent_of_its_time() -> None:
    run = start("test.asker", caps={"max_seconds": 100}, account=make_account())
    assert work() == ["waiting"]
    run.refresh_from_db()
    assert run.started_at is not None
    assert run.runnable_at is not None
    assert (run.runnable_at - run.started_at).total_seconds() == pytest.approx(80)

    with time_machine.travel(run.started_at + timedelta(seconds=81)):
        assert work() == ["waiting"]  # told, and parked again until its deadline
        assert work() == []

    assert sent() == [f"run:{run.pk}:max_seconds"]
    run.refresh_from_db()
    assert (run.runnable_at - run.started_at).total_seconds() == pytest.approx(100)


def test_home_lists_todays_notices(owner_client: Client) -> None:
    mission = make_mission(max_usd_micros=10_000)
    start("test.spender", {"calls": 8}, account=mission)
    work()

    content = owner_client.get("/").content.decode()

    assert f"Mission {mission.pk} has used 80 % of its spend cap." in content


# --- spend caps per provider --------------------------------------------------------------------


def model_caller(ctx: RunContext) -> Outcome:
    """Model calls of `usd` µ$ each (1,000 unless said) to the provider the input names,
    `calls` times."""
    for index in range(ctx.input["calls"]):
        ctx.step(
            StepKind.MODEL_CALL,
            effect=Effect.MODEL_CALL,
            name="m",
            request={"turn": index, "provider": ctx.input["provider"], "model": "m"},
            execute=lambda call: Done(
                {"ok": True}, Cost(input_tokens=10, usd_micros=ctx.input.get("usd", 1000))
            ),
        )
    return Outcome(output="called")


PROGRAMS.add("test.model_caller", model_caller)


def test_it_refuses_model_calls_past_a_providers_daily_cap_and_names_it() -> None:
    budgets.set_provider_caps("anthropic", day=3000, month=None, actor=audit.Actor.command("test"))
    capped = start("test.model_caller", {"provider": "anthropic", "calls": 5})
    other = start("test.model_caller", {"provider": "openai", "calls": 5})

    assert sorted(work()) == ["budget_exhausted", "done"]

    capped.refresh_from_db()
    assert capped.status == "budget_exhausted"
    assert capped.usd_micros == 3000  # the 4th call was never made
    assert capped.error.startswith(
        "the daily spend cap of provider anthropic is reached (3000 of 3000 micro-dollars since"
    )
    other.refresh_from_db()
    assert (other.status, other.usd_micros) == ("done", 5000)


def test_it_refuses_model_calls_past_a_providers_monthly_cap() -> None:
    budgets.set_provider_caps("openai", day=None, month=2000, actor=audit.Actor.command("test"))

    run = start("test.model_caller", {"provider": "openai", "calls": 5})
    assert work() == ["budget_exhausted"]

    run.refresh_from_db()
    assert run.usd_micros == 2000
    assert "monthly spend cap of provider openai" in run.error


def test_the_owner_sets_and_lifts_a_providers_caps_audited() -> None:
    actor = audit.Actor.command("test")
    every = {"day": 15_000_000, "month": 150_000_000}
    assert budgets.provider_caps() == {"*": every}  # a fresh install's
    assert budgets.set_provider_caps("openai", day=5, month=None, actor=actor) == {
        "*": every,
        "openai": {"day": 5, "month": None},
    }
    # No cap for openai, whatever each provider's caps say.
    assert budgets.set_provider_caps("openai", day=None, month=None, actor=actor) == {
        "*": every,
        "openai": {"day": None, "month": None},
    }
    with pytest.raises(KernelError, match="The day cap of openai is an integer"):
        budgets.set_provider_caps("openai", day=0, month=None, actor=actor)
    assert budgets.caps_of(budgets.provider_caps(), "openai") == {"day": None, "month": None}
    assert budgets.caps_of(budgets.provider_caps(), "anthropic") == every
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.POLICY_CHANGED).count() == 2


def test_a_fresh_install_caps_each_provider_a_day() -> None:
    # $6 calls under the default $15 a day of each provider: the 4th is refused. The account
    # has no cap of its own, so only the provider's stops it.
    assert not GlobalBudget.objects.exists()
    run = start("test.model_caller", {"provider": "anthropic", "calls": 5, "usd": 6_000_000})

    assert work() == ["budget_exhausted"]

    run.refresh_from_db()
    assert run.usd_micros == 18_000_000
    assert "the daily spend cap of provider anthropic is reached" in run.error


def test_it_tells_the_owner_once_at_80_percent_of_a_providers_cap() -> None:
    actor = audit.Actor.command("test")
    budgets.set_provider_caps("*", day=10_000, month=None, actor=actor)
    budgets.set_provider_caps("openai", day=None, month=None, actor=actor)
    start("test.model_caller", {"provider": "anthropic", "calls": 9})
    start("test.model_caller", {"provider": "openai", "calls": 20})  # not capped: no notice

    assert sorted(work()) == ["done", "done"]

    day = timezone.now().date().isoformat()
    assert sent() == [f"provider:anthropic:day:{day}"]
    assert [event.data["message"] for event in events()] == [
        "Spend on anthropic has reached 80 % of its daily cap."
    ]


def test_a_providers_spend_is_kept_by_the_day_and_read_from_there() -> None:
    run = start("test.model_caller", {"provider": "openai", "calls": 3})
    assert work() == ["done"]

    now = timezone.now().astimezone(UTC)
    today = now.date()
    assert list(ProviderSpend.objects.values_list("day", "provider", "usd_micros")) == [
        (today, "openai", 3000)
    ]
    run.refresh_from_db()
    assert run.usd_micros == 3000
    # An earlier day of the month counts toward the month's cap, not toward today's.
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    earlier = today - timedelta(days=1) if today.day > 1 else today - timedelta(days=40)
    ProviderSpend.objects.create(day=earlier, provider="openai", usd_micros=500)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    assert budgets.provider_spent("openai", midnight) == 3000
    assert budgets.provider_spent("openai", month) == (3500 if today.day > 1 else 3000)
    assert budgets.provider_spent("anthropic", month) == 0
