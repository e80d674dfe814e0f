"""The sequencer: event numbers follow commit visibility, gapless, and never skip a late commit."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from kernel import journal, stream
from kernel.models import Event
from tests.stream.factories import insert_event, raw_connection

pytestmark = pytest.mark.django_db(transaction=True)


def numbers() -> dict[int, int | None]:
    return dict(Event.objects.values_list("id", "number"))


def test_it_numbers_the_backlog_in_id_order() -> None:
    with connection.cursor() as cursor:
        # Rows written before the stream existed have no transaction id: they count as old.
        cursor.execute(
            "INSERT INTO kernel_event (at, kind, trust, data, tx)"
            " VALUES (now(), 'old', 'system', '{}', NULL)"
        )
    for kind in ("a", "b", "c"):
        journal.append_event(kind)
    assert set(numbers().values()) == {None}

    assert stream.sequence() == 4

    ids = sorted(numbers())
    assert [numbers()[pk] for pk in ids] == [1, 2, 3, 4]
    assert [event["kind"] for event in stream.page(0, 10)] == ["old", "a", "b", "c"]
    assert stream.head() == 4
    assert stream.sequence() == 0


def test_it_never_skips_an_event_that_becomes_visible_after_a_higher_one() -> None:
    with raw_connection() as early, raw_connection() as late:
        # `early` gets its transaction id first, `late` then writes the lower event id.
        early.execute("SELECT pg_current_xact_id()")
        low = insert_event(late, "low id, committed last")
        high = insert_event(early, "high id, committed first")
        assert low < high
        early.commit()

        stream.sequence()
        first = stream.page(0, 10)
        assert [event["kind"] for event in first] == ["high id, committed first"]
        cursor = first[-1]["number"]

        late.commit()
        stream.sequence()

    # An id cursor would be past `low` already; the number cursor is not.
    assert [(e["number"], e["kind"]) for e in stream.page(cursor, 10)] == [
        (cursor + 1, "low id, committed last")
    ]


def test_it_waits_for_an_older_writer_before_numbering_younger_ones() -> None:
    with raw_connection() as slow, raw_connection() as quick:
        insert_event(slow, "slow")
        insert_event(quick, "quick")
        quick.commit()

        assert stream.sequence() == 0  # `quick` is younger than the running `slow`
        assert stream.page(0, 10) == []

        slow.commit()
        assert stream.sequence() == 2

    assert [e["kind"] for e in stream.page(0, 10)] == ["slow", "quick"]


def test_it_ignores_rolled_back_events() -> None:
    with raw_connection() as conn:
        insert_event(conn, "never happened")
        conn.rollback()
    journal.append_event("happened")

    stream.sequence()

    assert [(e["number"], e["kind"]) for e in stream.page(0, 10)] == [(1, "happened")]


def test_it_pages_by_cursor() -> None:
    for index in range(5):
        journal.append_event("tick", index=index)
    stream.sequence()

    assert [e["data"]["index"] for e in stream.page(0, 2)] == [0, 1]
    assert [e["data"]["index"] for e in stream.page(2, 2)] == [2, 3]
    assert [e["data"]["index"] for e in stream.page(4, 2)] == [4]
    assert stream.page(5, 2) == []


def test_it_gives_a_polling_reader_every_event_once_under_concurrent_writers() -> None:
    """Writers commit in any order while sequencers race; a reader polling with its cursor
    collects exactly the events table, in number order, numbers gapless."""
    writers, per_writer = 4, 40
    done = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            with raw_connection() as conn:
                for index in range(per_writer):
                    insert_event(conn, f"{name}:{index}")
                    if index % 3 == 0:
                        time.sleep(0.001)  # hold some transactions open across others
                    conn.commit()
        except BaseException as error:
            errors.append(error)

    def read() -> None:
        cursor = 0
        try:
            while True:
                finished = done.is_set()
                stream.sequence()
                events = stream.page(cursor, 50)
                for event in events:
                    seen.append(event["number"])
                    cursor = event["number"]
                if finished and not events:
                    return
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def sequence_often() -> None:
        try:
            while not done.is_set():
                stream.sequence()
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(f"w{n}",)) for n in range(writers)]
    helpers = [threading.Thread(target=read), threading.Thread(target=sequence_often)]
    for thread in [*helpers, *threads]:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    for thread in helpers:
        thread.join()

    assert errors == []
    total = writers * per_writer
    assert seen == list(range(1, total + 1))
    rows = list(Event.objects.order_by("number").values_list("number", "kind"))
    assert [number for number, _kind in rows] == seen
    # Each writer's own events keep their commit order.
    for n in range(writers):
        mine = [kind for _number, kind in rows if kind.startswith(f"w{n}:")]
        assert mine == [f"w{n}:{index}" for index in range(per_writer)]
