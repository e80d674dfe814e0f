from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.db import connection

from kernel import partitions
from kernel.models import Event

pytestmark = pytest.mark.django_db


def partition_of(event: Event) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM kernel_event WHERE id = %s", [event.pk]
        )
        (name,) = cursor.fetchone() or (None,)
    return str(name)


def months_from(first: date, count: int) -> list[str]:
    names = []
    for offset in range(count):
        index = first.year * 12 + first.month - 1 + offset
        names.append(f"kernel_event_y{index // 12:04d}m{index % 12 + 1:02d}")
    return names


def test_it_creates_monthly_partitions_in_the_migration() -> None:
    monthly = [name for name in partitions.partitions() if name != partitions.DEFAULT]

    # 0004 created this month and three ahead when the test database was built.
    assert len(monthly) >= 4
    assert partitions.partitions()[-1] == partitions.DEFAULT


def test_it_covers_this_month_and_three_ahead() -> None:
    partitions.ensure_partitions()

    this_month = datetime.now(tz=UTC).date().replace(day=1)
    assert set(months_from(this_month, 4)) <= set(partitions.partitions())


def test_it_creates_nothing_when_called_again() -> None:
    partitions.ensure_partitions()

    assert partitions.ensure_partitions() == []


def test_it_names_months_across_a_year_end() -> None:
    created = partitions.ensure_partitions(today=date(2040, 11, 17), months_ahead=3)

    assert created == [
        "kernel_event_y2040m11",
        "kernel_event_y2040m12",
        "kernel_event_y2041m01",
        "kernel_event_y2041m02",
    ]
    assert partitions.partitions()[-5:] == [*created, partitions.DEFAULT]


def test_it_moves_events_out_of_the_default_partition() -> None:
    inside = Event.objects.create(at=datetime(2045, 6, 30, 23, 59, tzinfo=UTC), kind="x")
    after = Event.objects.create(at=datetime(2045, 7, 1, tzinfo=UTC), kind="y")
    assert partition_of(inside) == partitions.DEFAULT

    assert partitions.ensure_partitions(today=date(2045, 6, 1), months_ahead=0) == [
        "kernel_event_y2045m06"
    ]

    assert partition_of(inside) == "kernel_event_y2045m06"
    assert partition_of(after) == partitions.DEFAULT
    assert Event.objects.get(pk=inside.pk).kind == "x"


def test_it_routes_new_events_of_a_created_month_to_it() -> None:
    partitions.ensure_partitions(today=date(2046, 3, 1), months_ahead=0)

    event = Event.objects.create(at=datetime(2046, 3, 1, tzinfo=UTC), kind="x", data={"a": 1})

    assert partition_of(event) == "kernel_event_y2046m03"
    assert Event.objects.get(pk=event.pk).data == {"a": 1}


def test_it_finds_events_by_id_through_the_orm() -> None:
    now = datetime.now(tz=UTC)
    first = Event.objects.create(at=now, kind="first")
    second = Event.objects.create(at=now, kind="second")

    assert second.pk > first.pk
    assert Event.objects.get(pk=first.pk).kind == "first"
    assert list(Event.objects.filter(pk__in=[first.pk, second.pk])) == [first, second]
