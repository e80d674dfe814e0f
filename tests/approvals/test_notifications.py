"""The owner is told of every outcome: each one becomes one notification row, derived from the
event stream, and reaches the subscribed browsers through the local push service (decrypted
with the browser's key, as a phone would), at once, in the day's digest, or not at all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from django.test import Client
from django.utils import timezone

from approvals import notifications, push
from approvals.models import Delivery, Notification, NotificationSettings, Told
from approvals.tools import NOTIFY_OWNER
from kernel import notices, programs, runs, scheduler, waits
from kernel.context import RunContext
from kernel.models import Run, RunStatus
from kernel.programs import Outcome
from kernel.worker import Worker
from missions.models import Mission
from tests.approvals.factories import make_approval, make_mission
from tests.approvals.test_push import Browser, PushService, service, subscribe

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["service"]  # the local push service, a fixture of the push tests


def tells(ctx: RunContext) -> Outcome:
    """An agent's `notify_owner`, through the owner tool itself, once per message."""
    assert NOTIFY_OWNER.interact is not None
    for message in ctx.input["messages"]:
        NOTIFY_OWNER.interact(ctx, cast(Any, None), {"message": message})
    return Outcome()


programs.PROGRAMS.add("test.notifications.tells", tells)


def end(mission: Mission, status: str, error: str = "") -> Run:
    """A mission's root run started and ended by the kernel with `status`."""
    run = runs.start_run(account=mission, program="test.approvals.asks", input={})
    claim = scheduler.claim_next_run(worker="test", lease_seconds=30)
    assert claim is not None
    assert claim.fence.run_id == run.pk
    scheduler.finish(claim.fence, status=status, error=error)
    return run


def payloads(service: PushService, phone: Browser) -> list[dict[str, Any]]:
    return [phone.read(received) for received in service.received]


def choose(**modes: str) -> None:
    notifications.choose(modes=modes, digest_hour=18, time_zone="Europe/Paris")


@pytest.fixture
def phone(owner_client: Client, service: PushService) -> Browser:
    notifications.deliver_one()  # the cursor starts at the stream's head
    return subscribe(owner_client, service, "phone")


@pytest.mark.parametrize(
    ("status", "title"),
    [
        (RunStatus.DONE, "Mission done"),
        (RunStatus.FAILED, "Mission failed"),
        (RunStatus.BLOCKED, "Mission blocked"),
        (RunStatus.BUDGET_EXHAUSTED, "Mission stopped by a cap"),
    ],
)
def test_it_pushes_a_missions_end_once_and_opens_the_mission(
    phone: Browser, service: PushService, status: str, title: str
) -> None:
    mission = make_mission("Publish the 1.3 release notes")
    end(mission, status, error="" if status == RunStatus.DONE else "it went wrong")

    notifications.deliver_one()
    notifications.deliver_one()

    (payload,) = payloads(service, phone)
    assert payload["title"] == title
    assert payload["body"].startswith("Publish the 1.3 release notes")
    assert ("it went wrong" in payload["body"]) is (status != RunStatus.DONE)
    assert payload["url"] == f"/missions/{mission.pk}/"
    assert Notification.objects.get().pushed_at is not None


def test_it_tells_of_a_cancelled_mission_but_not_of_a_sub_agents_end(
    phone: Browser, service: PushService
) -> None:
    mission = make_mission()
    root = runs.start_run(account=mission, program="test.approvals.asks", input={})
    runs.request_stop(root.pk)
    claim = scheduler.claim_next_run(worker="test", lease_seconds=30)
    assert claim is not None
    scheduler.finish(claim.fence, status=RunStatus.DONE)  # a stopped run never ends done

    notifications.deliver_one()

    assert [p["title"] for p in payloads(service, phone)] == ["Mission cancelled"]
    assert Notification.objects.filter(kind=Told.MISSION_CANCELLED).count() == 1


def test_it_keeps_a_kind_turned_off_on_the_home_screen_only(
    owner_client: Client, phone: Browser, service: PushService
) -> None:
    choose(mission_failed="off")
    mission = make_mission("Migrate the billing tables")
    end(mission, RunStatus.FAILED, error="the tests failed")

    notifications.deliver_one()

    assert service.received == []
    row = Notification.objects.get()
    assert (row.kind, row.delivery, row.pushed_at) == (Told.MISSION_FAILED, Delivery.HOME, None)
    home = owner_client.get("/").content.decode()
    assert "Told you" in home
    assert "Migrate the billing tables: the tests failed" in home


def test_it_pushes_a_cap_notice_through_its_row(phone: Browser, service: PushService) -> None:
    mission = make_mission()
    notices.notify_once(
        f"account:{mission.pk}:max_tokens",
        message=f"Mission {mission.pk} has used 80 % of its tokens cap.",
        account_id=mission.pk,
    )

    notifications.deliver_one()

    (payload,) = payloads(service, phone)
    assert payload["title"] == "A cap is 80 % used"
    assert payload["url"] == f"/missions/{mission.pk}/"
    assert Notification.objects.get().kind == Told.CAP_NEAR


def test_it_tells_of_a_run_held_by_a_provider_past_its_first_hour_once(
    phone: Browser, service: PushService
) -> None:
    mission = make_mission("Summarise the incident")
    run = runs.start_run(account=mission, program="test.approvals.asks", input={})
    question = {"outage": {"provider": "anthropic", "said": "Anthropic overloaded (529)"}}
    waits.hold_step(run.pk, 1, question, due_at=timezone.now() + timedelta(minutes=15))
    Run.objects.filter(pk=run.pk).update(status=RunStatus.WAITING)

    notifications.deliver_one()  # held for less than an hour: nothing yet
    later = timezone.now() + timedelta(hours=1, minutes=1)
    notifications.deliver_one(now=later)
    notifications.deliver_one(now=later + timedelta(minutes=5))

    (payload,) = payloads(service, phone)
    assert payload["title"] == "A run waits on its provider"
    assert payload["body"] == "Anthropic overloaded (529) · Summarise the incident"
    assert payload["url"] == f"/runs/{run.pk}/"


def test_it_pushes_an_agents_message_at_most_once_per_mission_in_a_while(
    owner_client: Client, phone: Browser, service: PushService
) -> None:
    mission = make_mission()
    runs.start_run(
        account=mission,
        program="test.notifications.tells",
        input={"messages": ["The build is green.", "Tests pass too.", "Deploying now."]},
    )
    Worker(lease_seconds=30).run_until_idle()

    notifications.deliver_one()

    pushed = payloads(service, phone)
    assert [p["title"] for p in pushed] == ["A mission's agent says", "Mission done"]
    assert pushed[0]["body"] == "The build is green."
    assert pushed[0]["url"] == f"/missions/{mission.pk}/"
    told = Notification.objects.filter(kind=Told.AGENT_MESSAGE).order_by("pk")
    assert [n.delivery for n in told] == [Delivery.PUSH, Delivery.HOME, Delivery.HOME]
    assert "Deploying now." in owner_client.get("/").content.decode()

    # Past the quiet minutes, the mission's agent reaches the phone again.
    runs.start_run(
        account=mission, program="test.notifications.tells", input={"messages": ["Live."]}
    )
    Worker(lease_seconds=30).run_until_idle()
    service.received.clear()
    notifications.deliver_one(
        now=timezone.now() + timedelta(minutes=notifications.AGENT_PUSH_MINUTES + 1)
    )
    assert [p["body"] for p in payloads(service, phone)][:1] == ["Live."]


def test_it_sums_up_the_kinds_kept_for_the_digest_once_a_day_at_the_owners_hour(
    phone: Browser, service: PushService
) -> None:
    choose(mission_done="digest", mission_failed="digest")
    end(make_mission(), RunStatus.DONE)
    end(make_mission(), RunStatus.DONE)
    end(make_mission(), RunStatus.FAILED, error="no")
    morning = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)  # 10:00 in Paris
    evening = datetime(2026, 12, 7, 17, 5, tzinfo=UTC)  # 18:05 in Paris

    notifications.deliver_one(now=morning)
    assert service.received == []
    notifications.deliver_one(now=evening)
    notifications.deliver_one(now=evening + timedelta(hours=2))

    (payload,) = payloads(service, phone)
    assert payload["title"] == "Your day"
    assert payload["body"] == "2 missions done · 1 failed"
    assert payload["url"] == "/#told"
    assert not Notification.objects.filter(delivery=Delivery.DIGEST, digested_at=None).exists()

    # The next day with nothing kept: a digest row, and no push.
    notifications.deliver_one(now=evening + timedelta(days=1))
    assert len(service.received) == 1
    assert Notification.objects.filter(kind=Told.DIGEST).count() == 2


def test_it_does_not_push_an_approval_settled_before_its_turn(
    phone: Browser, service: PushService
) -> None:
    approval = make_approval()
    notifications.deliver_one()
    assert len(service.received) == 1
    service.received.clear()
    runs.answer_wait(approval.pk, answer={"approved": True})
    Notification.objects.filter(kind=Told.WAITING).update(pushed_at=None, claimed_until=None)

    notifications.push_pending()

    assert service.received == []
    assert Notification.objects.get(kind=Told.WAITING).delivery == Delivery.HOME


def dies(message: object) -> None:
    raise SystemExit("killed")


def test_it_posts_again_a_row_whose_process_died_with_the_same_tag(
    phone: Browser, service: PushService
) -> None:
    end(make_mission(), RunStatus.DONE)
    with pytest.MonkeyPatch.context() as patch:
        # The process dies between the claim and the post: the row stays claimed.
        patch.setattr(push, "send", dies)
        with pytest.raises(SystemExit):
            notifications.deliver_one()
    notifications.push_pending()
    assert service.received == []  # its lease still holds

    notifications.push_pending(now=timezone.now() + notifications.LEASE * 2)

    (payload,) = payloads(service, phone)
    assert payload["tag"] == f"run-{Run.objects.get().pk}-end"


def test_the_home_screen_dismisses_one_or_all(owner_client: Client) -> None:
    notifications.deliver_one()  # the cursor starts at the stream's head
    end(make_mission("First mission"), RunStatus.DONE)
    end(make_mission("Second mission"), RunStatus.DONE)
    notifications.deliver_one()
    first = Notification.objects.get(body="First mission")

    owner_client.post(f"/told/{first.pk}/dismiss")

    home = owner_client.get("/").content.decode()
    assert "First mission" not in home
    assert "Second mission" in home
    owner_client.post("/told/dismiss")
    assert "Nothing new to tell you." in owner_client.get("/").content.decode()


def test_settings_keep_each_kinds_choice_and_refuse_a_bad_zone(owner_client: Client) -> None:
    page = owner_client.get("/settings/").content.decode()
    assert 'id="told-settings"' in page
    form = {f"mode_{kind}": "now" for kind in notifications.LISTED}
    form |= {"mode_waiting": "now", "mode_agent_message": "digest", "digest_hour": "7"}

    bad = owner_client.post("/settings/notifications", {**form, "time_zone": "Mars/Olympus"})
    assert bad.status_code == 400
    assert "Mars/Olympus is not a time zone" in bad.content.decode()
    digest_waits = owner_client.post(
        "/settings/notifications", {**form, "mode_waiting": "digest", "time_zone": "UTC"}
    )
    assert digest_waits.status_code == 400

    saved = owner_client.post("/settings/notifications", {**form, "time_zone": "Asia/Tokyo"})

    assert saved.status_code == 302
    prefs = NotificationSettings.objects.get()
    assert (prefs.mode("agent_message"), prefs.digest_hour, prefs.time_zone) == (
        "digest",
        7,
        "Asia/Tokyo",
    )
