"""Firing schedules: once per due time in the schedule's time zone, the catch-up policies after
a downtime, no overlap by default, one failing schedule on its own history line while the
others fire, and a due time that cannot fire twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, transaction

from agentos.core import audit
from kernel.models import Run, RunStatus
from missions import firing, schedules
from missions.cron import next_times, zone
from missions.models import FiringOutcome, Mission, Project, Schedule, ScheduleFiring

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)  # a Tuesday


@pytest.fixture(autouse=True)
def _model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")  # runs are created, never executed


@pytest.fixture
def project() -> Project:
    return Project.objects.create(name="p")


def make_schedule(
    project: Project, cron: str = "0 * * * *", *, since: datetime = T0, **values: object
) -> Schedule:
    """A schedule made through the service, as if created (and last fired) at `since`."""
    schedule = schedules.create_schedule(
        cron=cron,
        mission={"project_id": project.pk, "goal": values.pop("goal", "Digest.")},
        actor=audit.Actor.command("test"),
        **values,  # type: ignore[arg-type]  # the service's own keywords
    )
    Schedule.objects.filter(pk=schedule.pk).update(created_at=since)
    return Schedule.objects.get(pk=schedule.pk)


def outcomes(schedule: Schedule) -> list[tuple[str, str]]:
    return [
        (f"{line.due_at:%d %H:%M}", line.outcome) for line in schedule.firings.order_by("due_at")
    ]


def finish(mission_ids: list[int]) -> None:
    Run.objects.filter(account_id__in=mission_ids).update(status=RunStatus.DONE)


def test_it_fires_once_per_due_minute_in_the_schedules_time_zone(project: Project) -> None:
    # 08:30 in Paris is 07:30 UTC in winter.
    schedule = make_schedule(project, "30 8 * * *", time_zone="Europe/Paris")
    at = T0 + timedelta(minutes=30, seconds=12)

    (started,) = firing.fire_due(at)

    assert firing.fire_due(at + timedelta(seconds=30)) == []  # same minute: once
    assert firing.fire_due(at + timedelta(minutes=1)) == []  # not due
    run = Run.objects.get(account_id=started)
    assert run.contract["trigger"] == f"schedule:{schedule.pk}"
    assert Mission.objects.get(pk=started).goal == "Digest."
    assert outcomes(schedule) == [("01 07:30", "started")]
    assert Schedule.objects.get(pk=schedule.pk).last_fired_at == T0 + timedelta(minutes=30)


def test_it_shows_the_next_times_across_a_daylight_saving_change() -> None:
    paris = zone("Europe/Paris")
    # Clocks go forward at 02:00 on 28 March 2027: 02:30 that day is 03:30 (once).
    times = next_times("30 2 * * *", paris, now=datetime(2027, 3, 26, 12, tzinfo=UTC))
    assert [f"{t:%d %H:%M %z}" for t in times] == [
        "27 02:30 +0100",
        "28 03:30 +0200",
        "29 02:30 +0200",
        "30 02:30 +0200",
        "31 02:30 +0200",
    ]
    # Clocks go back at 03:00 on 31 October 2027: 02:30 comes twice, it is due once.
    times = next_times("30 2 * * *", paris, now=datetime(2027, 10, 30, 12, tzinfo=UTC))
    assert [f"{t:%d %H:%M %z}" for t in times][:2] == ["31 02:30 +0200", "01 02:30 +0100"]


@pytest.mark.parametrize(
    ("policy", "expected", "started"),
    [
        (
            "skip",
            [
                ("01 08:00", "skipped_catch_up"),
                ("01 09:00", "skipped_catch_up"),
                ("01 10:00", "skipped_catch_up"),
            ],
            0,
        ),
        (
            "once",
            [
                ("01 08:00", "skipped_catch_up"),
                ("01 09:00", "skipped_catch_up"),
                ("01 10:00", "started"),
            ],
            1,
        ),
        (
            "each",
            [("01 08:00", "started"), ("01 09:00", "started"), ("01 10:00", "started")],
            3,
        ),
    ],
)
def test_it_catches_up_after_a_downtime_by_its_policy(
    project: Project, policy: str, expected: list[tuple[str, str]], started: int
) -> None:
    schedule = make_schedule(project, catch_up=policy, allow_overlap=True)

    # Down from 07:00 to 10:20: 08:00, 09:00 and 10:00 were missed.
    fired = firing.fire_due(T0 + timedelta(hours=3, minutes=20))

    assert len(fired) == started
    assert outcomes(schedule) == expected
    assert firing.fire_due(T0 + timedelta(hours=3, minutes=21)) == []  # dealt with, once


def test_a_time_due_just_now_is_on_time_whatever_the_policy(project: Project) -> None:
    schedule = make_schedule(project, catch_up="skip")

    # The minute task ran two minutes late, after 08:00: that is not a downtime.
    (started,) = firing.fire_due(T0 + timedelta(hours=1, minutes=2))

    assert outcomes(schedule) == [("01 08:00", "started")]
    assert ScheduleFiring.objects.get().mission_id == started


def test_it_skips_a_time_while_its_last_mission_still_runs(project: Project) -> None:
    schedule = make_schedule(project, catch_up="each")

    # Each missed time but the first finds the first one's mission unfinished.
    first = firing.fire_due(T0 + timedelta(hours=2))
    finish(first)
    second = firing.fire_due(T0 + timedelta(hours=3))

    assert len(first) == len(second) == 1
    assert outcomes(schedule) == [
        ("01 08:00", "started"),
        ("01 09:00", "skipped_overlap"),
        ("01 10:00", "started"),
    ]


def test_a_failing_schedule_is_its_own_line_and_the_others_fire(project: Project) -> None:
    broken = make_schedule(project, goal="Broken.")
    healthy = make_schedule(project, goal="Healthy.")
    # Its project is gone since the template was checked: starting it is refused.
    Schedule.objects.filter(pk=broken.pk).update(mission={"project_id": 999999, "goal": "x"})
    invalid = make_schedule(project, goal="Invalid.")
    Schedule.objects.filter(pk=invalid.pk).update(cron="61 * * * *")  # edited in the database

    started = firing.fire_due(T0 + timedelta(hours=1))

    assert [Mission.objects.get(pk=pk).goal for pk in started] == ["Healthy."]
    (line,) = broken.firings.all()
    assert (line.outcome, line.error, line.mission_id) == ("failed", "No project 999999.", None)
    assert outcomes(healthy) == [("01 08:00", "started")]
    (said,) = invalid.firings.all()
    assert said.outcome == FiringOutcome.FAILED
    assert "Invalid cron expression" in said.error
    # Said once, not each minute.
    firing.fire_due(T0 + timedelta(hours=1, minutes=1))
    assert invalid.firings.count() == 1


def test_a_paused_schedule_does_not_fire_and_resumes_from_now(project: Project) -> None:
    schedule = make_schedule(project, catch_up="each", allow_overlap=True)
    schedules.set_enabled(schedule.pk, False, actor=audit.Actor.command("test"))

    assert firing.fire_due(T0 + timedelta(hours=1)) == []
    schedules.set_enabled(
        schedule.pk, True, actor=audit.Actor.command("test")
    )  # at the real now, after T0: nothing was missed

    assert firing.fire_due(T0 + timedelta(hours=3)) == []
    assert not schedule.firings.exists()


def test_a_due_time_cannot_fire_twice(project: Project) -> None:
    schedule = make_schedule(project)
    (started,) = firing.fire_due(T0 + timedelta(hours=1))
    # A second worker that missed the first one's commit (last_fired_at rolled back, say):
    Schedule.objects.filter(pk=schedule.pk).update(last_fired_at=None)

    assert firing.fire_due(T0 + timedelta(hours=1)) == []  # its history says it fired
    with pytest.raises(IntegrityError), transaction.atomic():
        ScheduleFiring.objects.create(
            schedule=schedule, due_at=T0 + timedelta(hours=1), outcome=FiringOutcome.STARTED
        )
    assert Mission.objects.filter(pk=started).count() == Mission.objects.count() == 1


def test_a_firing_killed_before_its_commit_leaves_nothing_and_fires_again(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedule = make_schedule(project)

    def killed(*args: object, **kwargs: object) -> None:
        raise SystemExit("kill -9")  # not an Exception: nothing catches it, as with a kill

    # Dies after the mission and its firing line are written, before last_fired_at is.
    with monkeypatch.context() as patched:
        patched.setattr(Schedule, "save", killed)
        with pytest.raises(SystemExit):
            firing.fire_one(schedule.pk, now=T0 + timedelta(hours=1))
    assert not Mission.objects.exists()
    assert not ScheduleFiring.objects.exists()

    (started,) = firing.fire_due(T0 + timedelta(hours=1))
    assert outcomes(schedule) == [("01 08:00", "started")]
    assert ScheduleFiring.objects.get().mission_id == started
